"""A series: the ordered patches of one upstream (patches/<name>/series) and the overlay files they own."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import PatchkitError
from .paths import under
from .patchfile import PatchFile, parse_patch


@dataclass
class Series:
    name: str
    directory: Path
    patches: list[PatchFile]
    overlay_root: Path               # overlay/ (holds files in wheel layout)
    overlay_owner: dict[str, int]    # wheel path -> index of the patch that wires it in
    unclaimed: list[str]             # overlay files no patch claims: never applied, `check` fails on them

    def overlay_bytes(self, relpath: str) -> bytes:
        return (self.overlay_root / relpath).read_bytes()


def read_series_file(directory: Path) -> list[str]:
    listing = directory / "series"
    if not listing.is_file():
        return []
    names = []
    for line in listing.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def load_series(name: str, patches_root: Path, overlay_root: Path, root: str) -> Series:
    directory = Path(patches_root) / name
    names = read_series_file(directory)
    on_disk = sorted(p.name for p in directory.glob("*.patch")) if directory.is_dir() else []
    for n in names:
        if "/" in n or n not in on_disk:
            raise PatchkitError(f"{directory}/series: lists unknown patch {n}, found no such file in {directory}")
    if len(set(names)) != len(names):
        raise PatchkitError(f"{directory}/series: expected each patch once, found a duplicate")
    stray = [n for n in on_disk if n not in names]
    if stray:
        raise PatchkitError(f"{directory}: patch file {stray[0]} is not listed in {directory}/series")
    patches = [parse_patch(directory / n) for n in names]
    owner: dict[str, int] = {}
    for i, p in enumerate(patches):
        # Paths from the patch (its diff, its Overlay: header) are confined before anything is read:
        # `sglang/../../../x` would otherwise be read from outside overlay/ and written outside the target.
        for path in p.paths:
            under(path, root, f"{p.path}: diff path")
        for rel in p.overlay:
            under(rel, root, f"{p.path}: Overlay")
            if not (Path(overlay_root) / rel).is_file():
                raise PatchkitError(f"{p.path}: Overlay: expected file overlay/{rel}, found none")
            if rel in owner:
                raise PatchkitError(f"{p.path}: overlay/{rel} is already claimed by {patches[owner[rel]].name}")
            owner[rel] = i
    unclaimed = []
    if Path(overlay_root, root).is_dir():
        for f in sorted(Path(overlay_root, root).rglob("*")):
            rel = f.relative_to(overlay_root).as_posix()
            if f.is_file() and "__pycache__" not in rel and rel not in owner:
                unclaimed.append(rel)
    return Series(name, directory, patches, Path(overlay_root), owner, unclaimed)
