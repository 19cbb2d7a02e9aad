#!/usr/bin/env bash
# A study with executor=vllm on one H200: each trial's config on `vllm serve` (vLLM 0.26.0), Llama-3-8B shape with
# random weights (load_format: dummy) and a tokenizer of its vocabulary (experiments/vllm_model_dir.py says why),
# against vLLM with no engine flag. The default window: 300 requests of azure_llm_2023_code.csv from 1,800 s, the
# last half of its time held out (188 searched, 112 held out), each held for replay.min_window_s=30 s at least
# (with tuner.capacity_tol=0.1, 10% over capacity puts a server 2 s behind, slo.ttft_s, within 20 s): capacities up
# to 6.2 and 3.7 req/s. Simulated (H200 Llama-3-8B profile), vLLM's defaults reach 1.3 req/s there, so a passing
# replay of the search window takes about 150 s: `python -m experiments.study_cost` sizes a conclusion. The
# 30-minute window thinned to 2% of the earlier studies (92 + 23 requests) can show nothing above 1.5 req/s held
# for a minute: simulated, every config met the SLO there, so capacity could not rank them.
# Re-running the same command resumes the study (stores in /tmp/study-$NAME while the machine stays warm); vLLM's
# compile cache (/tmp/vllm-cache) is shared by every start, so only the first pays the full compile. A study that
# outlasts a machine (30 minutes held at most, a session's device time) travels: every run leaves
# $OUT/$NAME-state.tar.gz (the Optuna and MLflow stores, the output folder; a few MB), and a fresh machine given it
# back as $STATE/$NAME-state.tar.gz (STATE defaults to .study, carried) resumes the study from there.
#
# Needs, on the host: the tuner's wheels (.whl, ../shared/gpu/make-wheelhouse.sh), the trace in .traces/ (carried)
# or $TRACES, and vLLM 0.26.0 installed under /tmp/vsite (../shared/gpu/vllm-wheelhouse.sh, then experiments/vllm_slim.sh:
# three parts carried over back-to-back calls; `bash experiments/gpu_vs_vllm.sh install` joins and installs them).
#
#   bash experiments/gpu_vllm_study.sh NAME SECONDS [overrides...]                   the study; output under $OUT
#   CHECK=FILE bash experiments/gpu_vllm_study.sh NAME SECONDS [overrides...]        FILE (an exported vllm.yaml,
#       carried) measured as it is against vLLM's defaults on the same window: python -m tuner.vllm_check
set -o pipefail
name=${1:?name}; seconds=${2:?wall-clock limit}; shift 2
traces=${TRACES:-$PWD/.traces}
[ -d /tmp/vsite/vllm ] || { echo "no vLLM under /tmp/vsite: install it first (../shared/gpu/vllm-wheelhouse.sh)"; exit 1; }
[ -d /tmp/site/optuna ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/vsite:/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1
model=/tmp/vllm-llama-3-8b
[ -f $model/tokenizer.json ] || python3 -m experiments.vllm_model_dir llama-3-8b $model || exit 1
dir=/tmp/study-$name
source experiments/gpu_study_state.sh
study_restore $name $dir
root=$PWD
entry=(-m tuner); [ -n "$CHECK" ] && entry=(-m tuner.vllm_check "$(realpath "$CHECK")")
[ -n "$CHECK" ] || space=(search=vllm)
cd $dir
start=$(date +%s)
timeout $seconds python3 "${entry[@]}" +traffic=$traces/azure_llm_2023_code.csv model=llama3-8b "${space[@]}" \
  executor=vllm "executor.vllm.command=[python3,-m,vllm.entrypoints.cli.main]" executor.vllm.model=$model \
  '+executor.vllm.args={load_format: dummy, max_model_len: 8192}' executor.vllm.cache_dir=/tmp/vllm-cache \
  executor.vllm.work_dir=$dir/vllm executor.vllm.start_timeout_s=600 \
  tuner.study_name=$name storage.url=sqlite:///$dir/optuna.db tracking.uri=sqlite:///$dir/mlflow.db \
  storage.heartbeat_interval_s=10 storage.grace_period_s=30 storage.max_retry=0 replay.long_prompts=truncate \
  runtime.scheduler.max_model_len=8192 replay.start_s=1800 replay.max_requests=300 validation.holdout_fraction=0.5 \
  replay.min_window_s=30 tuner.capacity_tol=0.1 \
  tuner.trial_timeout_s=900 \
  hydra.run.dir=$dir/out "$@" 2>&1 | grep -v "INFO mlflow\|^$" | tee -a $OUT/$name.txt
echo "exit ${PIPESTATUS[0]}; wall seconds: $(( $(date +%s) - start ))" | tee -a $OUT/$name.txt
cp out/report.md $OUT/$name-report.md 2>/dev/null; cp out/best.yaml $OUT/$name-best.yaml 2>/dev/null
cp out/vllm.yaml $OUT/$name-vllm.yaml 2>/dev/null; cp out/pagetune.log $OUT/$name.log 2>/dev/null
mkdir -p $OUT/$name-vllm && cp $dir/vllm/*.yaml $OUT/$name-vllm/ 2>/dev/null
for f in $dir/vllm/*.log; do tail -n 40 "$f" > $OUT/$name-vllm/$(basename "$f"); done 2>/dev/null
study_save $name $dir
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a $OUT/$name.txt
python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" | tee -a $OUT/$name.txt
cd $root
