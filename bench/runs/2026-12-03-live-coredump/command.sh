#!/bin/bash
# Issue 27: name the kernel that raises "illegal instruction" with OVERLAY_DUMMY_INIT=scaled: a GPU core dump on the
# exception (light flags), read back with cuda-gdb. One patched (mma) server, eager, batch 1.
export OVERLAY_EMULATE_SM120=1 PYTHONUNBUFFERED=1
ls /usr/local/cuda/bin | grep -E "cuda-gdb|compute-sanitizer" ; which cuda-gdb compute-sanitizer
export CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION=0
export CUDA_COREDUMP_GENERATION_FLAGS=skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,skip_local_memory
export CUDA_COREDUMP_FILE=$OUT/core_%p.nvcudmp
python3 -m serving.serve_cmd --install-only --bundle build/bundle --tree patched > $OUT/install.txt 2>&1; echo "install rc=$?"
timeout -k 10 230 python3 -m bench.live_compare --bundle build/bundle --out $OUT/scaled --variants mma --eager \
    --batch 1 --output-len 8 --start-timeout 210 > $OUT/scaled.txt 2>&1; echo "live rc=$?"
grep -E "illegal|healthy|FAIL" $OUT/scaled.txt | cut -c1-200 | tail -5
ls -la $OUT
GDB=$(which cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
for f in $OUT/core_*.nvcudmp; do [ -f "$f" ] || continue; echo "##### $f"
  timeout 90 $GDB -batch -ex "target cudacore $f" -ex "info cuda kernels" -ex "bt" -ex "x/4i \$pc" -ex "info cuda devices" > $f.gdb.txt 2>&1
  cut -c1-250 $f.gdb.txt | grep -v "^$" | tail -30; done
gzip -9 $OUT/scaled/*-server.log $OUT/core_*.nvcudmp 2>/dev/null; ls -la $OUT
