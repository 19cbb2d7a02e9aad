#!/usr/bin/env bash
# One device call (issue 28): the prefill kernel before and after this change, on the same GPU, and its TMA path.
#   - before: the kernels of the last commit, copied aside into .old/kernels (carried; `.old` is git-ignored):
#       mkdir -p .old && git archive HEAD kernels | tar -x -C .old
#   - after: the working tree's kernels (the scale folded into the exponent, P @ V accumulated into acc);
#   - --tma on 64- and 128-token pages: K/V tiles by TMA beside the same launch by pointers, checked;
#   - the warp-specialized launches beside their twins, checked;
#   - the GPU kernel tests.
# Optional first argument: a vLLM part to copy to /tmp (cp .vllm/pK/partK /tmp/), so the call also starts the
# five-part burst of gpu_vs_vllm.sh. MODES: the "after" runs' bench_prefill options, comma-separated, `default` for
# none (default all four: 'default,--tma --block-size 64,--tma --block-size 128,--warp-specialized'). Output under $OUT: prefill.md (every table), kernel-tests.log.
set -o pipefail
# Bench rows are kept as they print (then the final table's repeats dropped): a run cut at its limit keeps them.
export PYTHONUNBUFFERED=1
[ -n "${1:-}" ] && cp "$1" /tmp/ && ls -la /tmp/part*
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/prefill.md
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a $OUT/prefill.md
echo "## before (.old/kernels), 16-token pages" | tee -a $OUT/prefill.md
bash experiments/gpu_vs_vllm.sh old-tree  # why a copy: `python -m` puts the working folder first on the path
(cd /tmp/oldtree && PYTHONPATH=$PWD timeout 150 python3 -m experiments.bench_prefill --heads 28 4 2>&1) \
  | grep --line-buffered -E '^\||^## |^20' | awk '!seen[$0]++ {print; fflush()}' | tee -a $OUT/prefill.md
IFS=, read -ra modes <<< "${MODES:-default,--tma --block-size 64,--tma --block-size 128,--warp-specialized}"
for mode in "${modes[@]}"; do
  [ "$mode" = default ] && mode=""
  echo "## after: $mode" | tee -a $OUT/prefill.md
  PYTHONPATH=$PWD timeout 200 python3 -m experiments.bench_prefill --heads 28 4 $mode 2>&1 \
    | grep --line-buffered -E '^\||^## |^20' | awk '!seen[$0]++ {print; fflush()}' | tee -a $OUT/prefill.md
done
PYTHONPATH=$PWD timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu.py 2>&1 \
  | tail -25 | tee $OUT/kernel-tests.log
