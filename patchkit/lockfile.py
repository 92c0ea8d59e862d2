"""Read pin.lock: which upstream artifacts the series is written against."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import PatchkitError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        raise SystemExit("patchkit needs Python >= 3.11 (tomllib) or the 'tomli' package on Python 3.10")

_REQUIRED = ("package", "version", "artifact", "sha256", "root")


@dataclass(frozen=True)
class Upstream:
    name: str            # series name: patches/<name>/
    package: str         # distribution name on the package index
    version: str
    artifact: str        # exact file name of the pinned wheel
    sha256: str
    root: str            # top-level directory the series touches, e.g. "sglang"
    repo: str = ""
    repo_prefix: str = ""  # path of `root`'s parent inside the upstream git repo
    tag: str = ""


@dataclass(frozen=True)
class Lock:
    path: Path
    upstreams: dict[str, Upstream]
    runtime: dict[str, str] = field(default_factory=dict)
    index_url: str = "https://pypi.org/simple"

    def upstream(self, name: str) -> Upstream:
        try:
            return self.upstreams[name]
        except KeyError:
            raise PatchkitError(
                f"{self.path}: no [upstream.{name}] entry (known: {', '.join(self.upstreams) or 'none'})"
            ) from None


def load_lock(path: Path) -> Lock:
    path = Path(path)
    if not path.is_file():
        raise PatchkitError(f"{path}: lock file not found")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PatchkitError(f"{path}: not valid TOML ({exc})") from None
    upstreams = {}
    for name, entry in data.get("upstream", {}).items():
        missing = [k for k in _REQUIRED if not entry.get(k)]
        if missing:
            raise PatchkitError(f"{path}: [upstream.{name}] lacks {', '.join(missing)}")
        known = set(Upstream.__dataclass_fields__) - {"name"}
        upstreams[name] = Upstream(name=name, **{k: v for k, v in entry.items() if k in known})
    if not upstreams:
        raise PatchkitError(f"{path}: expected at least one [upstream.NAME] table, found none")
    return Lock(
        path=path,
        upstreams=upstreams,
        runtime={k: str(v) for k, v in data.get("runtime", {}).items()},
        index_url=data.get("index", {}).get("url", "https://pypi.org/simple"),
    )
