#!/usr/bin/env bash
# One device call of at most ~9 minutes (issue 28): a kernel change judged on the same GPU, kernel and end to end.
#   1. experiments/gpu_prefill_tma.sh: the prefill kernel before (.old/kernels, carried) and after, and with K/V by
#      TMA on 128-token pages; the GPU kernel tests ($OUT/prefill.md, $OUT/kernel-tests.log);
#   2. azure-code (Qwen2-7B) on pagetune alone, offline (first and best of two warm runs; no open loop): the
#      working tree, the old kernels, and 128-token pages with K/V by TMA ($OUT/e2e/*.json, $OUT/e2e.md).
# Carry .old .whlmini .traces. Each step has its own time limit, so what ran comes back.
set -o pipefail
export PYTHONUNBUFFERED=1
MODES=',--tma --block-size 128' timeout 250 bash experiments/gpu_prefill_tma.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite .whlmini/*.whl || exit 1
old=/tmp/oldtree; rm -rf $old && mkdir -p $old && tar -cf - . | tar -xf - -C $old && cp -r .old/kernels/. $old/kernels/
run="python3 -m experiments.bench_vs_vllm --model qwen2-7b --workloads azure-code --engines pagetune --open-repeats 0"
run="$run --trace $PWD/.traces/azure_llm_2023_code.csv --out $OUT/e2e"
export PYTHONPATH=/tmp/vsite:$PWD
timeout 100 $run 2>&1 | grep -E "^\{|^!!|Error" | cut -c1-300
(cd $old && PYTHONPATH=/tmp/vsite:$old timeout 100 $run --tag old-kernels 2>&1 | grep -E "^\{|^!!|Error" | cut -c1-300)
timeout 100 $run --tag pages128-tma --knobs '{"block_size": 128, "page_tma": true}' 2>&1 | tail -n 12 | tee $OUT/e2e.md
