#!/usr/bin/env bash
# The simulator's GPU calls (issue 12), one per device call (each under 10 minutes). Output under $OUT.
#   bash experiments/gpu_sim.sh profile llama-3-8b     # ~8 min: $OUT/h200-llama-3-8b.json, $OUT/profile-llama-3-8b.txt
#   bash experiments/gpu_sim.sh profile qwen2-7b       # ~8 min: $OUT/h200-qwen2-7b.json
#   bash experiments/gpu_sim.sh accuracy               # ~8 min: $OUT/sim_accuracy{,_mooncake}.{md,txt} (Azure code, Mooncake)
# The accuracy call reads conf/profiles/h200-llama-3-8b.json: copy the profile call's file there first.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
case "$1" in
  profile)
    python3 -m runtime.profile model="$2" out="$OUT/h200-$2.json" budget_s=${BUDGET_S:-420} 2>&1 | tee "$OUT/profile-$2.txt" ;;
  accuracy)
    trace=.traces/azure_llm_2023_code.csv
    [ -f "$trace" ] || trace=../shared/traces/azure_llm_2023_code.csv
    python3 experiments/sim_accuracy.py --profile conf/profiles/h200-llama-3-8b.json --trace "$trace" \
      --results "$OUT/sim_accuracy.md" 2>&1 | tee "$OUT/sim_accuracy.txt"
    moon=${trace%/*}/mooncake_fast25_synthetic_trace.jsonl  # long shared-prefix prompts, truncated to 8192
    python3 experiments/sim_accuracy.py --profile conf/profiles/h200-llama-3-8b.json --trace "$moon" \
      --start-s 100 --duration-s 15 --time-scale 1 --results "$OUT/sim_accuracy_mooncake.md" 2>&1 \
      | tee "$OUT/sim_accuracy_mooncake.txt" ;;
  *) echo "usage: $0 profile MODEL | accuracy" >&2; exit 2 ;;
esac
