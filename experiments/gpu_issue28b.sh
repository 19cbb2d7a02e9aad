#!/usr/bin/env bash
# One device call after the split-KV and compile changes of issue 28: the kernel and runtime GPU tests (the real
# SmolLM2 model's needs its GGUF, too large to carry beside the rest), then pagetune alone on the Llama-3-8B
# workloads of bench_vs_vllm.py at its defaults. Carry .whlmini. Output under $OUT.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whlmini/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu.py tests/runtime/test_gpu_runtime.py \
  -k "not real_model" 2>&1 | tail -4 | tee "$OUT/gpu-tests.log"
python3 -m experiments.bench_vs_vllm --model llama-3-8b --workloads uniform,mixed --engines pagetune --out "$OUT/bench" \
  --tag split256 2>&1 | grep -v -E "^\s*$|it/s\]" | tail -4
