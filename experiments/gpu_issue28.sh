#!/usr/bin/env bash
# One device call for the decode-speed work of issue 28 (no vLLM): where a decode step's host time goes,
# decode attention by split_kv_min_len, the no-compile-after-warm-up test, and pagetune on azure-code with the
# default split threshold and a low one (A/B in one call). Carry .whlmini and .traces. Output under $OUT.
#   bash experiments/gpu_issue28.sh [LOW_SPLIT]
set -uo pipefail
low=${1:-256}
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whlmini/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m experiments.host_gap --model qwen2-7b --seqs 8 64 --steps 150 2>&1 | grep "^|" | tee "$OUT/host_gap.md"
python3 -m experiments.bench_split_kv --model qwen2-7b 2>&1 | grep "^|" | tee "$OUT/split_qwen.md"
for knobs in "{\"split_kv_min_len\": $low}" "{}"; do
  tag=$([ "$knobs" = "{}" ] && echo default || echo "split$low")
  python3 -m experiments.bench_vs_vllm --model qwen2-7b --workloads azure-code --engines pagetune \
    --trace .traces/azure_llm_2023_code.csv --out "$OUT/bench" --knobs "$knobs" --tag "$tag" 2>&1 \
    | grep -v -E "^\s*$|it/s\]" | tail -4
done
python3 -c "
import json, glob
for f in sorted(glob.glob('$OUT/bench/*.json')):
    r = json.load(open(f)); w = r['workloads'][0]; o = w['open']
    print(r['engine'], 'warm tok/s %.0f first %.0f' % (w['warm_tok_s'], w['first_tok_s']),
          'TTFT p50/p99 %.3f/%.3f TPOT p50/p99 %.1f/%.1f ms' % (o['ttft_p50_s'], o['ttft_p99_s'], 1e3*o['tpot_p50_s'], 1e3*o['tpot_p99_s']),
          'compiles', w.get('compiles'), o.get('compiles'), 'ttft top', o.get('ttft_top_s'))
"
python3 -m pytest -q tests/runtime/test_gpu_runtime.py -k "compiles" -p no:cacheprovider 2>&1 | tail -4
