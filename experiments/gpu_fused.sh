#!/usr/bin/env bash
# One device call after the fused layer kernels: all GPU tests (kernels, runtime), the fused-kernel
# benchmark, the per-kernel profile of one prefill and one decode step, and the step-time profile of
# the mixed workload. Output under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
python3 -m pytest -q -m gpu tests/kernels/test_kernel_gpu.py tests/runtime/test_gpu_runtime.py -s -p no:cacheprovider \
  > $OUT/gpu_tests.txt 2>&1; tail -n 25 $OUT/gpu_tests.txt
python3 -m experiments.bench_layers --record --results $OUT/RESULTS_layers.md > $OUT/layers.txt 2>&1
tail -n 9 $OUT/layers.txt
python3 -m experiments.profile_step --record --results $OUT/RESULTS_step.md > $OUT/step.txt 2>&1
tail -n 32 $OUT/step.txt
python3 -m experiments.profile_e2e --record --results $OUT/RESULTS_profile.md > $OUT/profile.txt 2>&1
tail -n 4 $OUT/profile.txt
