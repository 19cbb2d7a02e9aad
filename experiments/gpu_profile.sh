#!/usr/bin/env bash
# One device call: GPU kernel tests, decode/prefill benchmarks at the default launches, the sampler
# benchmark, then the step-time profile of the mixed end-to-end workload. Output under $OUT.
#   bash experiments/gpu_profile.sh [extra profile_e2e.py args]      PROFILE_ONLY=1: the profile alone
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
if [ -z "$PROFILE_ONLY" ]; then
  python3 -m pytest -q -m gpu tests/kernels/test_kernel_gpu.py -p no:cacheprovider 2>&1 | tail -n 15 | tee $OUT/kernel_tests.txt
  python3 -m experiments.bench_decode --record --results $OUT/RESULTS_kernels.md > $OUT/decode.txt 2>&1
  python3 -m experiments.bench_prefill --record --results $OUT/RESULTS_kernels.md > $OUT/prefill.txt 2>&1
  python3 -m experiments.bench_sampler --record --results $OUT/RESULTS_sampler.md > $OUT/sampler.txt 2>&1
  tail -n 12 $OUT/sampler.txt
fi
python3 -m experiments.profile_e2e --record --results $OUT/RESULTS_profile.md "$@" > $OUT/profile.txt 2>&1
tail -n 30 $OUT/profile.txt
