"""Fetch pinned artifacts from a PEP 503 package index into a local cache, verifying sha256."""
from __future__ import annotations

import os
import sys
import tempfile
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urldefrag

from . import PatchkitError
from .hashing import sha256_file
from .names import canonical_name


def cache_dir() -> Path:
    root = os.environ.get("PATCHKIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "patchkit"
    )
    path = Path(root) / "artifacts"
    path.mkdir(parents=True, exist_ok=True)
    return path


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def index_links(index_url: str, package: str) -> list[tuple[str, str, str]]:
    """(file name, url without fragment, sha256 or '') for every file on the package's simple page."""
    page = f"{index_url.rstrip('/')}/{canonical_name(package)}/"
    try:
        with urllib.request.urlopen(page, timeout=60) as resp:
            html = resp.read().decode("utf-8", "replace")
    except OSError as exc:
        raise PatchkitError(f"cannot read package index page {page}: {exc}") from None
    parser = _Links()
    parser.feed(html)
    links = []
    for href in parser.hrefs:
        url, fragment = urldefrag(urljoin(page, href))
        digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else ""
        links.append((url.rsplit("/", 1)[-1], url, digest))
    return links


def find_artifact_url(index_url: str, package: str, artifact: str) -> str:
    for name, url, _ in index_links(index_url, package):
        if name == artifact:
            return url
    raise PatchkitError(f"{index_url}: expected artifact {artifact} of {package}, found no such file on the index")


def _download(url: str, dest: Path, label: str) -> None:
    tmp = tempfile.NamedTemporaryFile(dir=dest.parent, prefix=dest.name + ".", delete=False)
    try:
        with urllib.request.urlopen(url, timeout=120) as resp, tmp:
            total = int(resp.headers.get("Content-Length") or 0)
            done = 0
            for chunk in iter(lambda: resp.read(1 << 20), b""):
                tmp.write(chunk)
                done += len(chunk)
                if total and sys.stderr.isatty():
                    sys.stderr.write(f"\r  fetching {label}: {done >> 20}/{total >> 20} MiB")
            if total and sys.stderr.isatty():
                sys.stderr.write("\n")
        os.chmod(tmp.name, 0o644)  # a shared cache: readable like any downloaded file
        os.replace(tmp.name, dest)
    except BaseException:
        os.unlink(tmp.name)
        raise


def fetch(upstream, index_url: str, log=print) -> Path:
    """Return the cached, verified artifact of `upstream` (a lockfile.Upstream)."""
    dest = cache_dir() / upstream.artifact
    if not dest.exists():
        url = find_artifact_url(index_url, upstream.package, upstream.artifact)
        log(f"fetching {upstream.artifact} from {url.split('/')[2]}")
        try:
            _download(url, dest, upstream.artifact)
        except OSError as exc:
            raise PatchkitError(f"download of {url} failed: {exc}") from None
    found = sha256_file(dest)
    if found != upstream.sha256:
        raise PatchkitError(
            f"{dest}: sha256 mismatch for {upstream.package} {upstream.version}: "
            f"expected {upstream.sha256}, found {found} (delete the file to fetch it again)"
        )
    return dest
