#!/usr/bin/env bash
# The simulator's GPU calls (issue 12), one per device call (each under 10 minutes). Output under $OUT.
#   bash experiments/gpu_sim.sh profile llama-3-8b     # ~8 min: $OUT/h200-llama-3-8b.json, $OUT/profile-llama-3-8b.txt
#   bash experiments/gpu_sim.sh profile qwen2-7b       # ~8 min: $OUT/h200-qwen2-7b.json
#   bash experiments/gpu_sim.sh accuracy               # ~6 min: $OUT/real.json (measurements), sim_accuracy.{md,txt}, the refit
#   bash experiments/gpu_sim.sh capacity azure base,small-budget,no-graphs,tiers   # ~9 min: $OUT/capacity-azure.json
#   START=tiers=0.48 bash experiments/gpu_sim.sh capacity mooncake tiers   # the real search from x0.48
#   BUDGET_S=10 bash experiments/gpu_sim.sh capacity mooncake100 tiers     # ~7 min a config on 100 requests
#   CHECK=0.1 bash experiments/gpu_sim.sh capacity mooncake100 block-32,few-seqs  # ~4 min a config: within 10%?
#   bash experiments/gpu_sim.sh short-chunks           # ~1 min: prefill paths planned per layer vs once a step
#   bash experiments/gpu_sim.sh prefill-paths          # ~1 min: short chunks by SDPA vs by the flash kernel
# The accuracy call reads conf/profiles/h200-llama-3-8b.json: copy the profile call's file there first.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
case "$1" in
  profile)
    python3 -m runtime.profile model="$2" out="$OUT/h200-$2.json" budget_s=${BUDGET_S:-420} 2>&1 | tee "$OUT/profile-$2.txt" ;;
  accuracy)  # both windows (Azure code, Mooncake) in one process: the measurements, then the comparison
    python3 -m experiments.sim_accuracy --profile conf/profiles/h200-llama-3-8b.json --real-out "$OUT/real.json" \
      --out-md "$OUT/sim_accuracy.md" --refit-out "$OUT/h200-llama-3-8b.refit.json" 2>&1 | tee "$OUT/sim_accuracy.txt" ;;
  capacity)  # one window: real capacity searches from the simulated ones (BUDGET_S: start no config but the first after it)
    python3 -m experiments.sim_capacity --profile conf/profiles/h200-llama-3-8b.json --windows "$2" --only "$3" \
      --budget-s ${BUDGET_S:-380} ${START:+--start "$START"} ${CHECK:+--check "$CHECK"} --real-out "$OUT/capacity-$2.json" --out-md "$OUT/sim_capacity-$2.md" 2>&1 \
      | tee "$OUT/sim_capacity-$2.txt" ;;
  short-chunks)
    python3 -m experiments.bench_short_chunks --record --results "$OUT/RESULTS_short_chunks.md" 2>&1 \
      | tee "$OUT/bench_short_chunks.txt" ;;
  prefill-paths)
    python3 -m experiments.bench_prefill_paths --record --results "$OUT/RESULTS_prefill_paths.md" 2>&1 \
      | tee "$OUT/bench_prefill_paths.txt" ;;
  *) echo "usage: $0 profile MODEL | accuracy | capacity WINDOW CONFIGS | short-chunks | prefill-paths" >&2; exit 2 ;;
esac
