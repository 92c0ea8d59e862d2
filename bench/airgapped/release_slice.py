"""The few files of a line's pinned SGLang wheel that loading an overlay kernel module needs, as a folder.

    python3 -m bench.airgapped.release_slice [--line NAME] [--out DIR]   # default: the newest line, build/release-slice-LINE

An overlay kernel module registers its torch op with the release's own `register_custom_op`
(harness.upstream.release_custom_op): custom_op.py, the kernel_api_logging it imports and common.py. Loaded from
the pinned wheel, they need the wheel (12 MB) on the GPU machine; this folder holds those three files alone (read
from the wheel patchkit fetched and checked against pin.lock), so what is copied with a Triton payload still
fits. A bench given `--release-tree DIR` loads the overlay kernel with them (harness.upstream.load_kernel's tree).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.upstream import COMMON, CUSTOM_OP, _logging_module, _release_reader
from harness.line_files import command_lock
from serving import REPO


def write_slice(line: str, out: Path) -> list[str]:
    read, _ = _release_reader(None, line)
    custom_op = read(CUSTOM_OP)
    files = {CUSTOM_OP: custom_op, COMMON: read(COMMON)}
    logging_rel = _logging_module(custom_op).replace(".", "/") + ".py"
    files[logging_rel] = read(logging_rel)
    for rel, text in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    return sorted(files)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--line", help="the release line of pin.lock (default: the newest, or PATCHKIT_LINE)")
    ap.add_argument("--out", type=Path, help="default: build/release-slice-LINE")
    args = ap.parse_args(argv)
    line = command_lock(args.line).line
    out = args.out or REPO / "build" / f"release-slice-{line}"
    files = write_slice(line, out)
    print(f"{out}: {', '.join(files)} of the pinned sglang of line {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
