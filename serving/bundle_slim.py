"""Re-pack wheels for the offline bundle: drop what the DeepSeek-V4 server never loads, store uncompressed.

sglang-kernel and transformers are slimmed (the rules below); every other wheel is re-packed whole.

sglang-kernel 0.4.4 is 615 MB on the index and 1.8 GB unpacked; almost all of it is code the DSv4 server
never loads on the GPU the bundle is built for. The rules below name every dropped member and why; the
manifest records them. A wheel re-packed here keeps its name and version (pip installs it as the same
distribution) and gets a build tag and a rewritten RECORD, so it can never be mistaken for the index's file.

Wheels are re-packed STORED (uncompressed): the bundle compresses them together in one xz stream, which is
about half the size of the wheels' own per-file deflate.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

from patchkit.hashing import record_digest

# sgl_kernel/load_utils.py (0.4.4): compute capability 9.0 loads sgl_kernel/sm90/common_ops.*, every other
# GPU (sm_100, sm_120, ...) loads sgl_kernel/sm100/common_ops.*. Keep only the one the target GPU loads.
def kernel_ops_dir(gpu_cc: int) -> str:
    return "sm90" if gpu_cc == 90 else "sm100"


def kernel_drop_reason(member: str, gpu_cc: int) -> str | None:
    """Why `member` of the sglang-kernel wheel is left out of the bundle for a GPU of `gpu_cc`, or None to keep it."""
    name = member.rsplit("/", 1)[-1]
    if member.startswith("sgl_kernel/") and name.startswith("flash_ops") and ".so" in name:
        return ("FlashAttention-3 ops (1.76 GB unpacked); only sgl_kernel.flash_attn imports it, which the "
                "DeepSeek-V4 server path never does (import sgl_kernel does not load it)")
    keep = kernel_ops_dir(gpu_cc)
    for arch in ("sm90", "sm100"):
        if arch != keep and member.startswith(f"sgl_kernel/{arch}/"):
            return (f"common_ops for the other GPU family: sgl_kernel/load_utils.py loads "
                    f"sgl_kernel/{keep}/ on a compute capability {gpu_cc} GPU")
    return None


# transformers 5.8.1's models/ is 35 MB of its 42: every model's implementation, its modular_ sources and conversion
# scripts. The DeepSeek-V4 server path (sglang's model registry imports every sglang model module at start) imports
# the modeling_ modules of these models only; tests/serving/test_serve_transformers_slim.py imports that path against the
# pinned sglang (make test-serve) and fails on a modeling module not listed here.
TRANSFORMERS_MODELING_KEPT = frozenset({
    "auto", "clip", "glmasr", "llama", "llama4", "llava", "mistral3", "mllama", "parakeet", "pixtral", "qwen2",
    "qwen2_5_vl", "qwen2_audio", "siglip", "vitdet", "whisper"})


def transformers_drop_reason(member: str) -> str | None:
    """Why `member` of the transformers wheel is left out of the bundle, or None to keep it (configurations,
    tokenizers and processors of every model stay: AutoConfig / AutoTokenizer look them up by name)."""
    parts = member.split("/")
    if len(parts) != 4 or parts[:2] != ["transformers", "models"] or not parts[3].endswith(".py"):
        return None
    model, name = parts[2], parts[3]
    if name.startswith(("modular_", "convert_")):
        return ("modular source or conversion script: transformers' import structure skips both "
                "(utils/import_utils.py create_import_structure_from_path), nothing imports them")
    if name.startswith("modeling_") and model not in TRANSFORMERS_MODELING_KEPT:
        return "a model implementation the DeepSeek-V4 server path does not import (bundle_slim.TRANSFORMERS_MODELING_KEPT)"
    return None


def _dist_info(names: list[str]) -> str:
    for n in names:
        if n.endswith(".dist-info/WHEEL") and n.count("/") == 1:
            return n.split("/")[0]
    raise ValueError("no *.dist-info/WHEEL in wheel")


def slimmed_name(wheel_name: str, tag: str) -> str:
    """name-version-TAG-py-abi-plat.whl (a wheel build tag must start with a digit)."""
    parts = wheel_name[:-len(".whl")].split("-")
    if len(parts) == 6:          # already has a build tag: replace it
        parts.pop(2)
    parts.insert(2, tag)
    return "-".join(parts) + ".whl"


def repack(src: Path, dest: Path, drop=lambda member: None) -> list[dict]:
    """Write `src` to `dest` STORED, without the members `drop(member)` gives a reason for.

    RECORD is rewritten to list exactly the kept files with their hashes. Returns
    [{"path", "size", "why"}] for every dropped member.
    """
    removed = []
    with zipfile.ZipFile(src) as zin:
        infos = [i for i in zin.infolist() if not i.is_dir()]
        dist_info = _dist_info([i.filename for i in infos])
        record_name = f"{dist_info}/RECORD"
        kept, records = [], []
        for info in infos:
            if info.filename == record_name:
                continue
            why = drop(info.filename)
            if why:
                removed.append({"path": info.filename, "size": info.file_size, "why": why})
                continue
            data = zin.read(info)
            kept.append((info, data))
            records.append(f"{info.filename},{record_digest(data)},{len(data)}")
        records.append(f"{record_name},,")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as zout:
            for info, data in kept:
                out = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                out.external_attr = info.external_attr
                zout.writestr(out, data, compress_type=zipfile.ZIP_STORED)
            rec = zipfile.ZipInfo(record_name, date_time=kept[0][0].date_time if kept else (1980, 1, 1, 0, 0, 0))
            rec.external_attr = 0o644 << 16
            zout.writestr(rec, "\n".join(records) + "\n", compress_type=zipfile.ZIP_STORED)
        tmp.replace(dest)
    return removed


def slim_kernel_wheel(src: Path, out_dir: Path, gpu_cc: int) -> tuple[Path, list[dict]]:
    """The sglang-kernel wheel for one GPU family, without FA3; (path, removed members)."""
    dest = Path(out_dir) / slimmed_name(Path(src).name, f"1slim{kernel_ops_dir(gpu_cc)}")
    removed = repack(Path(src), dest, drop=lambda m: kernel_drop_reason(m, gpu_cc))
    return dest, removed


def slim_transformers_wheel(src: Path, out_dir: Path) -> tuple[Path, list[dict]]:
    """The transformers wheel without the model code the DeepSeek-V4 server never imports; (path, removed members)."""
    dest = Path(out_dir) / slimmed_name(Path(src).name, "1slimdsv4")
    return dest, repack(Path(src), dest, drop=transformers_drop_reason)
