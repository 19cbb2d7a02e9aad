#!/usr/bin/env bash
# One device call: GPU tests of kernels and runtime, then the end-to-end benchmark. Output under $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
python3 -m pytest -q -m gpu tests/runtime/test_gpu_runtime.py -s -p no:cacheprovider 2>&1 | tail -n 40 | tee $OUT/gpu_tests.txt
python3 -m experiments.bench_e2e --record --results $OUT/RESULTS_e2e.md "$@" 2>&1 | tail -n 60 | tee $OUT/e2e.txt
