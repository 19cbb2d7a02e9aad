#!/usr/bin/env bash
# FlashAttention 4 (PyPI flash-attn-4, its CuTe-DSL kernels: `kernel.prefill_kernel: fa4`) for an offline GPU host
# that takes at most 64 MiB a call. Run here, in the project's root (DEST ignored by git):
#
#   bash experiments/fa4_wheelhouse.sh .fa4        # DEST/p0/part0, DEST/p1/part1: one tar of every wheel, split
#
# About 100 MB: nvidia-cutlass-dsl's CUDA 13 libraries (92 MB, the image's torch is cu130), its Python package
# (`cutlass`, in nvidia-cutlass-dsl-libs-core; cuda-bindings is the image's) and FA4 with what it imports. Carry
# DEST/pK and copy DEST/pK/partK to /tmp/fa4partK in two back-to-back calls (move the large tracked folder aside
# first, as for vLLM's parts: experiments/gpu_vs_vllm.sh); `gpu_vs_vllm.sh install-fa4` joins them and installs into
# /tmp/fa4site, a folder of its own: FA4 wants apache-tvm-ffi >= 0.1.11 where vLLM 0.26.0 pins 0.1.10, so only
# pagetune's processes put it on their path.
set -euo pipefail
dest=${1:?usage: fa4_wheelhouse.sh DEST}
mkdir -p "$dest/whl"
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps "${plat[@]}" -d "$dest/whl" flash-attn-4==4.0.0b40 nvidia-cutlass-dsl==4.8.1 \
  nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
  quack-kernels==0.6.5 \
  torch-c-dlpack-ext==0.1.5 "apache-tvm-ffi==0.1.15.post2" einops==0.8.2
tar -cf "$dest/fa4.tar" -C "$dest/whl" .
rm -rf "$dest"/p[0-9]
split -b 52M -d -a 1 "$dest/fa4.tar" "$dest/part"
for part in "$dest"/part[0-9]; do k=${part##*part}; mkdir -p "$dest/p$k" && mv "$part" "$dest/p$k/part$k"; done
rm "$dest/fa4.tar"
ls -l "$dest"/p[0-9]/part[0-9]
