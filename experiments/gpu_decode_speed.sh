#!/usr/bin/env bash
# Decode-speed work of issue 28 on the GPU, pagetune alone (no vLLM), one device call per mode. Carry .whlmini
# (and .traces for `diagnose`). Output under $OUT.
#   bash experiments/gpu_decode_speed.sh diagnose [LOW_SPLIT]  a decode step's host time (sync, then async
#        scheduling: the GPU's idle share between steps in each), decode attention by
#        split_kv_min_len, azure-code at the default threshold and at LOW_SPLIT (A/B in one call), no compile after
#        the warm-up
#   bash experiments/gpu_decode_speed.sh check   the kernel and runtime GPU tests (the real SmolLM2 model's needs
#        its GGUF, too large to carry beside the rest), then the Llama-3-8B workloads of bench_vs_vllm at defaults
set -uo pipefail
mode=${1:?diagnose or check}; low=${2:-256}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whlmini/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
bench() { python3 -m experiments.bench_vs_vllm --engines pagetune --out "$OUT/bench" "$@" 2>&1 | grep -v -E "^\s*$|it/s\]" | tail -4; }
if [ "$mode" = diagnose ]; then
  python3 -m experiments.host_gap --model qwen2-7b --seqs 8 64 --steps 150 2>&1 | grep "^|" | tee "$OUT/host_gap.md"
  python3 -m experiments.host_gap --model qwen2-7b --seqs 8 64 --steps 150 --async 2>&1 | grep "^|" \
    | tee "$OUT/host_gap_async.md"
  python3 -m experiments.bench_split_kv --model qwen2-7b 2>&1 | grep "^|" | tee "$OUT/split_qwen.md"
  for split in "$low" 2048; do
    bench --model qwen2-7b --workloads azure-code --trace .traces/azure_llm_2023_code.csv \
      --knobs "{\"split_kv_min_len\": $split}" --tag "split$split"
  done
  python3 -m pytest -q tests/runtime/test_gpu_runtime.py -k "compiles" -p no:cacheprovider 2>&1 | tail -4
else
  python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu.py tests/runtime/test_gpu_runtime.py \
    -k "not real_model" 2>&1 | tail -4 | tee "$OUT/gpu-tests.log"
  bench --model llama-3-8b --workloads uniform,mixed
fi
