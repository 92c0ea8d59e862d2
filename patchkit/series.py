"""A series: the ordered patches of one upstream (patches/<name>/series) and the overlay files they own.

Patch data is read only from regular files: a symlink, FIFO or device anywhere in patches/<line>/<name>/ or
under overlay/<line>/ is refused, one line naming it, and so is a link at patches/, patches/<line>/ or
overlay/ on the way there, so no command reads a file from outside the repository (or blocks on a FIFO)
through the data, and export never writes through one.

A patch is named three ways (ARCHITECTURE.md, "A patch's names"): its file name (or that name less `.patch`),
its `NNNN` series number, and the short label the series' data gives it (`label` of its `[[patch]]` in
LABELS_FILE). `Series.by_name` is the one lookup: exact, never a part of a name.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from . import PatchkitError, fsio
from .lockfile import tomllib
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
    _labels: dict[str, str] | None = field(default=None, repr=False)

    def overlay_bytes(self, relpath: str) -> bytes:
        return fsio.read_regular(self.overlay_root / relpath, "an overlay file")

    def labels(self) -> dict[str, str]:
        """file name -> label, from LABELS_FILE beside the series (read once, when first asked: apply never needs it)."""
        if self._labels is None:
            self._labels = read_labels(self.directory)
        return self._labels

    def by_name(self, key: str) -> PatchFile | None:
        """The patch `key` names exactly: its label (any case), its NNNN number (leading zeros optional), its file
        name, or its file name less `.patch`; None when it names none of this series."""
        labels = self.labels()
        for p in self.patches:
            number = p.name.split("-", 1)[0]
            if (key in (p.name, p.name.removesuffix(".patch"))
                    or (labels.get(p.name) and key.upper() == labels[p.name].upper())
                    or (key.isdigit() and number.isdigit() and int(key) == int(number))):
                return p
        return None

    def label_of(self, patch: PatchFile) -> str:
        return self.labels().get(patch.name, "")


def non_regular_entries(top: Path) -> list[tuple[Path, str]]:
    """Every entry under `top` (itself included) that is neither a regular file nor a real directory."""
    found = []
    kind = fsio.kind_of(top)
    if kind not in (None, "a directory"):
        return [(Path(top), kind)]
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            entry = Path(dirpath) / name
            kind = fsio.kind_of(entry)
            if kind not in ("a regular file", "a directory"):
                found.append((entry, kind))
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return sorted(found)


def refuse_non_regular(top: Path, what: str) -> None:
    bad = non_regular_entries(top)
    if bad:
        entry, kind = bad[0]
        raise PatchkitError(f"{entry}: expected {what} to hold regular files only, found {kind}")


def refuse_linked_data(patches_root: Path, overlay_root: Path) -> None:
    """patches/, patches/<line>/, overlay/ and overlay/<line>/ (the directories above the series and the
    overlay files) must be real directories of the repository, never links to elsewhere."""
    for path in (Path(patches_root).parent, Path(patches_root), Path(overlay_root).parent, Path(overlay_root)):
        kind = fsio.kind_of(path)
        if kind not in (None, "a directory"):
            raise PatchkitError(f"{path}: expected a directory of the repository, found {kind}"
                                + (f" (to {os.readlink(path)})" if kind == "a symlink" else ""))


LABELS_FILE = "upstream-pr.toml"    # each [[patch]]: file = "NNNN-....patch", label = "..." (and what goes upstream)


def read_labels(directory: Path) -> dict[str, str]:
    """file name -> label of every [[patch]] of `directory`/LABELS_FILE that has one ({} without the file)."""
    path = Path(directory) / LABELS_FILE
    raw = fsio.read_regular(path, "a patch description file")
    if raw is None:
        return {}
    try:
        entries = tomllib.loads(raw.decode("utf-8")).get("patch", [])
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PatchkitError(f"{path}: expected TOML, found an error: {exc}") from None
    if not isinstance(entries, list):
        raise PatchkitError(f"{path}: expected [[patch]] tables, found {type(entries).__name__}")
    return {e["file"]: e["label"] for e in entries
            if isinstance(e, dict) and isinstance(e.get("file"), str) and isinstance(e.get("label"), str) and e["label"]}


def read_series_file(directory: Path) -> list[str]:
    listing = directory / "series"
    raw = fsio.read_regular(listing, "a series listing")
    if raw is None:
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchkitError(f"{listing}: expected UTF-8 text, found byte {raw[exc.start]:#04x} at offset {exc.start}") from None
    # Its bytes are part of the series digest: a CRLF copy would read as the same list yet give a digest no
    # released version has. The fix is the file's line endings, never a new version, for every command alike.
    crlf = next((n for n, line in enumerate(text.split("\n"), 1) if line.endswith("\r")), None)
    if crlf:
        raise PatchkitError(f"{listing}: expected LF line endings, found CRLF (\\r\\n) at line {crlf}: the file was "
                            f"converted (an editor, a copy); convert it back to LF, e.g. with sed -i 's/\\r$//' "
                            f"{listing}; nothing written")
    names = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def load_series(name: str, patches_root: Path, overlay_root: Path, root: str) -> Series:
    directory = Path(patches_root) / name
    refuse_linked_data(patches_root, overlay_root)
    refuse_non_regular(directory, "a patch directory")
    refuse_non_regular(Path(overlay_root), "overlay/")
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
            kind = fsio.kind_of(Path(overlay_root) / rel)
            if kind != "a regular file":
                raise PatchkitError(f"{p.path}: Overlay: expected file overlay/{rel}, found {kind or 'none'}")
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
