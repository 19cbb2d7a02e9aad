#!/usr/bin/env bash
# What the device calls carry, rebuilt on a fresh checkout (every folder here is ignored by git, so a new
# checkout starts without them). Run from the repository root on this (CPU) machine; each step is skipped
# where its folder is already there. About two minutes with PyPI reachable.
#
#   bash experiments/gpu_prep.sh            # .traces .whlmini .old .vllm (slim, three parts) .fa4 (two parts)
#   bash experiments/gpu_prep.sh whl        # and .whl, the tuner's wheels for the GPU studies (issues 29, 30)
#
#   .traces     ../shared/traces (which does not travel)
#   .whlmini    hydra-core, omegaconf, antlr4: the replay's imports the GPU image lacks (gpu_vs_vllm.sh)
#   .old        kernels/ of OLD_KERNELS (default 1e8d55a): a kernel change's baseline (gpu_kernel_change.sh)
#   .vllm       vLLM 0.26.0 in three parts and its deps (../shared/gpu/vllm-wheelhouse.sh, then vllm_slim.sh)
#   .fa4        FlashAttention 4 and its CuTe DSL in two parts (fa4_wheelhouse.sh; kernel.prefill_kernel: fa4)
#   .whl        optuna, mlflow-skinny, sqlalchemy, ... (../shared/gpu/make-wheelhouse.sh)
set -euo pipefail
here=$(dirname "$0")
for d in /.vllm/ /.whlmini/ /.old/ /.fa4/; do  # .traces and .whl are in .gitignore
  grep -qxF "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude
done
[ -d .traces ] || { mkdir -p .traces && cp ../shared/traces/* .traces/; }
if [ ! -d .whlmini ]; then
  mkdir -p .whlmini
  python3 -m pip wheel -q --no-deps -w .whlmini "antlr4-python3-runtime==4.9.3"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whlmini "hydra-core==1.3.*" "omegaconf==2.3.*"
fi
[ -d .old/kernels ] || { mkdir -p .old && git archive "${OLD_KERNELS:-1e8d55a}" kernels | tar -x -C .old; }
if [ ! -d .vllm/p0 ]; then
  bash ../shared/gpu/vllm-wheelhouse.sh .vllm
  bash "$here/vllm_slim.sh" .vllm
fi
[ -d .fa4/p0 ] || bash "$here/fa4_wheelhouse.sh" .fa4
if [ "${1:-}" = whl ] && [ ! -d .whl ]; then
  bash ../shared/gpu/make-wheelhouse.sh .whl httpx2 fastapi uvicorn gguf
fi
du -sh .traces .whlmini .old .vllm/* .fa4/* ${1:+.whl} 2>/dev/null
