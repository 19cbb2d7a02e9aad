#!/usr/bin/env bash
# One device call of at most ~9 minutes (issue 28): a kernel change judged on the same GPU, kernel and end to end.
#   1. experiments/gpu_prefill_tma.sh: the prefill kernel before (.old/kernels, carried) and after, and with K/V by
#      TMA on 128-token pages; the GPU kernel tests ($OUT/prefill.md, $OUT/kernel-tests.log);
#   2. azure-code (Qwen2-7B) on pagetune alone, offline (first and best of two warm runs; no open loop): the
#      working tree, the old kernels, and 128-token pages (K/V by TMA) ($OUT/e2e/*.json, $OUT/e2e.md).
# Carry .old .whlmini .traces. Each step has its own time limit, so what ran comes back: KERNEL_S (170) for the
# before/after benches and the tests, TMA_S (100) for the TMA bench ($OUT/prefill-tma128.md), E2E_S (100) for each
# engine run of step 2; E2E: which of new,old,tma run (default all three).
set -o pipefail
# Bench rows are kept as they print (then the final table's repeats dropped): a run cut at its limit keeps them.
export PYTHONUNBUFFERED=1
MODES=default timeout ${KERNEL_S:-170} bash experiments/gpu_prefill_tma.sh  # before and after, the GPU kernel tests
PYTHONPATH=$PWD timeout ${TMA_S:-100} python3 -m experiments.bench_prefill --heads 28 4 --tma --block-size 128 2>&1 \
  | grep --line-buffered -E '^\||^## |^20' | awk '!seen[$0]++ {print; fflush()}' > $OUT/prefill-tma128.md
bash experiments/gpu_vs_vllm.sh install-mini && bash experiments/gpu_vs_vllm.sh old-tree || exit 1
old=/tmp/oldtree
run="python3 -m experiments.bench_vs_vllm --model qwen2-7b --workloads azure-code --engines pagetune --open-repeats 0"
run="$run --trace $PWD/.traces/azure_llm_2023_code.csv --out $OUT/e2e"
export PYTHONPATH=/tmp/vsite:$PWD
e2e=",${E2E:-new,old,tma},"
[[ $e2e == *,new,* ]] && timeout ${E2E_S:-100} $run 2>&1 | grep -E "^\{|^!!|Error" | cut -c1-300
[[ $e2e == *,old,* ]] && (cd $old && PYTHONPATH=/tmp/vsite:$old timeout ${E2E_S:-100} $run --tag old-kernels 2>&1 \
  | grep -E "^\{|^!!|Error" | cut -c1-300)
[[ $e2e == *,tma,* ]] && timeout ${E2E_S:-100} $run --tag pages128 --knobs '{"block_size": 128}' \
  2>&1 | grep -E "^\{|^!!|Error" | cut -c1-300
python3 -c "from experiments.bench_vs_vllm import table; from pathlib import Path; print(table(Path('$OUT/e2e')))" \
  | tee $OUT/e2e.md
