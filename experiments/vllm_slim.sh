#!/usr/bin/env bash
# vLLM 0.26.0's wheel for Hopper hosts in three parts instead of five: FlashAttention 2's kernels
# (vllm_flash_attn/_vllm_fa2_C.abi3.so, 130 of the wheel's 304 MB) left out. On compute capability 9.x vLLM
# runs FlashAttention 3 (v1/attention/backends/fa_utils.py, get_flash_attn_version) and imports FA2 only where
# it is present (vllm_flash_attn/flash_attn_interface.py, FA2_AVAILABLE); a path that would need FA2 fails
# with vLLM's own message. Here, after `bash ../shared/gpu/vllm-wheelhouse.sh .vllm`:
#
#   bash experiments/vllm_slim.sh .vllm     # .vllm/p0..p2 replace p0..p4 (each part under 58 MiB)
#
# then carry .vllm/pK and copy .vllm/pK/partK to /tmp in three back-to-back calls; `gpu_vs_vllm.sh install`
# joins whatever /tmp/part[0-9] holds.
set -euo pipefail
dest=${1:?usage: vllm_slim.sh DEST}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
name=vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl
cat "$dest"/p[0-9]/part[0-9] > "$tmp/full.whl"
python3 - "$tmp/full.whl" "$tmp/$name" <<'PY'
import sys
import zipfile

src, dst = sys.argv[1:]
drop = "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so"
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
    names = zin.namelist()
    if drop not in names:
        sys.exit(f"{src}: no {drop} (already slim?)")
    for info in zin.infolist():
        if info.filename == drop:
            continue
        data = zin.read(info)
        if info.filename.endswith(".dist-info/RECORD"):  # pip writes its own RECORD; keep this one true
            data = b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(drop.encode()))
        zout.writestr(info, data)
PY
rm -rf "$dest"/p[0-9]
split -b 58m -d -a 1 "$tmp/$name" "$tmp/part"
for f in "$tmp"/part[0-9]; do i=${f##*part}; mkdir -p "$dest/p$i"; mv "$f" "$dest/p$i/"; done
du -sh "$dest"/p[0-9]
