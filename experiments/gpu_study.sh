#!/usr/bin/env bash
# One device call: the GPU runtime tests, then a real study on one H200 (Llama-3-8B shape, random bf16
# weights) on a window of the Azure LLM code trace. Needs the tuner's wheels (.whl, see
# ../shared/gpu/make-wheelhouse.sh) and the trace copied to .traces/ (both carried). Output under $OUT.
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1
if [ -z "$SKIP_TESTS" ]; then  # SKIP_TESTS=1: the study alone
  python3 -m pytest -q -m gpu tests/runtime/test_gpu_runtime.py -s -p no:cacheprovider 2>&1 | tail -n 12 | tee $OUT/gpu_tests.txt
fi
mkdir -p /tmp/study && cd /tmp/study
start=$(date +%s)
python3 -m tuner +traffic=$OLDPWD/.traces/azure_llm_2023_code.csv model=llama3-8b search=gpu \
  tuner.n_trials=12 tuner.study_name=h200-azure-code tuner.timeout_s=330 tuner.trial_timeout_s=90 \
  replay.max_requests=300 replay.time_scale=10 replay.long_prompts=truncate validation.repeats=2 \
  hydra.run.dir=/tmp/study/out "$@" 2>&1 | tail -n 60 | tee $OUT/study.txt
echo "wall seconds: $(( $(date +%s) - start ))" | tee -a $OUT/study.txt
cp out/report.md out/best.yaml out/vllm.yaml $OUT/ 2>/dev/null
cp out/plots/optimization_history.png out/plots/latency_cdf.png $OUT/ 2>/dev/null
