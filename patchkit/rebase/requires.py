"""What a release requires (its wheel's Requires-Dist), read through pip without downloading the wheel.

`pip install --dry-run --no-deps --report` resolves one exact version with the pinned wheel's own tags and
reports the chosen wheel's metadata (pip reads it from the index's metadata file, PEP 658, or the file
itself on a local wheelhouse), so even a 1 GB wheel costs a second. What was read is cached as a small JSON
per release under the patchkit cache (`releases/`), written atomically: a matrix over many releases is fast
once cached. The release list of a package comes from `pip index versions`.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote

from .. import PatchkitError, jsonio
from ..fetch import _pip_reason, cache_dir, wheel_target
from ..fsio import atomic_write
from ..hashing import sha256_file
from ..names import canonical_name as normalize

try:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version
except ModuleNotFoundError:      # pip always carries it
    from pip._vendor.packaging.specifiers import InvalidSpecifier, SpecifierSet
    from pip._vendor.packaging.version import InvalidVersion, Version

_REQ_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(\(?[^;()]*\)?)\s*(;.*)?$")


def _releases_dir() -> Path:
    d = cache_dir().parent / "releases"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _platforms(target: list[str]) -> list[str]:
    """pip takes each --platform literally: a manylinux_2_N wheel's platform also admits older glibc tags."""
    args, out = list(target), []
    i = 0
    while i < len(args):
        if args[i] == "--platform":
            plat = args[i + 1]
            m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", plat)
            if m:
                out += [f"manylinux_2_{n}_{m.group(2)}" for n in range(int(m.group(1)), 16, -1)]
                out.append(f"manylinux2014_{m.group(2)}")
            else:
                out.append(plat)
            i += 2
            continue
        i += 1
    return out


def _pip_metadata(package: str, version: str, like: str) -> dict:
    target = wheel_target(like)
    rest = [a for i, a in enumerate(target) if a != "--platform" and (i == 0 or target[i - 1] != "--platform")]
    plats = [x for p in _platforms(target) for x in ("--platform", p)]
    with tempfile.TemporaryDirectory(prefix="patchkit-requires-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
               "--only-binary=:all:", "--ignore-requires-python", "--disable-pip-version-check", "--quiet",
               *rest, *plats, "--target", str(Path(tmp) / "t"), "--report", str(report), f"{package}=={version}"]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        if proc.returncode or not report.is_file():
            raise PatchkitError(f"pip could not read the metadata of {package}=={version} (tags of {like}): "
                                f"{_pip_reason(proc.stderr, proc.returncode)} (pip's configuration says where it looks)")
        data = jsonio.read(report, "pip's installation report",
                           lambda d: None if isinstance(d, dict) else "expected a JSON object")
    installs = data.get("install") or []
    if len(installs) != 1:
        raise PatchkitError(f"pip --report for {package}=={version}: expected one wheel, found {len(installs)}")
    meta = installs[0].get("metadata", {})
    info = installs[0].get("download_info") or {}
    digest = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256", "")
    return {"package": package, "version": version, "like": like,
            "requires_dist": list(meta.get("requires_dist") or []),
            # the file pip would download and the digest the index publishes for it (may be empty)
            "artifact": unquote(str(info.get("url", "")).rsplit("/", 1)[-1].split("#")[0]), "sha256": digest}


def release_info(package: str, version: str, like: str) -> dict:
    """{requires_dist, artifact, sha256} of `package==version` (the wheel with `like`'s tags), cached."""
    key = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{normalize(package)}-{version}-{like}") + ".json"
    cached = _releases_dir() / key
    if cached.is_file():
        try:
            data = jsonio.read(cached, "a cached release record")
            if (isinstance(data, dict) and data.get("package") == package and data.get("version") == version
                    and isinstance(data.get("requires_dist"), list) and "sha256" in data):
                return data
        except PatchkitError:
            pass     # a damaged or older cache entry is read again through pip
    data = _pip_metadata(package, version, like)
    atomic_write(cached, json.dumps(data, indent=1, sort_keys=True).encode())
    return data


def requires_dist(package: str, version: str, like: str) -> list[str]:
    return list(release_info(package, version, like)["requires_dist"])


def cached_wheel(package: str, version: str, like: str) -> tuple[str, str, Path] | None:
    """(artifact, sha256, path) when the wheel pip would download is already cached with the index's digest."""
    info = release_info(package, version, like)
    name, digest = info.get("artifact", ""), info.get("sha256", "")
    if not name.endswith(".whl") or "/" in name or not re.fullmatch(r"[0-9a-f]{64}", digest or ""):
        return None
    path = cache_dir() / name
    return (name, digest, path) if path.is_file() and sha256_file(path) == digest else None


def requirement(lines: list[str], package: str) -> str | None:
    """The version specifier `lines` put on `package` (markers of extras ignored), None when not required."""
    want = normalize(package)
    for line in lines:
        m = _REQ_RE.match(line)
        if not m or normalize(m.group(1)) != want:
            continue
        if m.group(4) and "extra" in m.group(4):
            continue
        return m.group(3).strip("() ") or ""
    return None


def pinned_version(spec: str) -> str | None:
    """The one version a specifier names: '==X' -> X, '~=X' -> X (the lowest it admits); else None."""
    m = re.fullmatch(r"\s*(==|~=|===)\s*([^,\s]+)\s*", spec or "")
    return m.group(2) if m else None


def is_version(text: str) -> bool:
    """Whether `text` is a version as pip reads one (PEP 440)."""
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def satisfies(version: str, spec: str) -> bool:
    try:
        return SpecifierSet(spec).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


def release_versions(package: str, after: str | None = None) -> list[str]:
    """Every final release of `package` the index lists (oldest first), strictly after `after` when given."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "--disable-pip-version-check", package],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)
    m = re.search(r"^Available versions: (.*)$", proc.stdout, re.M)
    if proc.returncode or not m:
        raise PatchkitError(f"pip index versions {package} failed: {_pip_reason(proc.stderr, proc.returncode)}")
    versions = sorted({v.strip() for v in m.group(1).split(",") if v.strip()}, key=Version)
    versions = [v for v in versions if not Version(v).is_prerelease]
    return [v for v in versions if after is None or Version(v) > Version(after)]
