#!/usr/bin/env bash
# A capacity study on one H200: Llama-3-8B shape (random bf16 weights) on a window of a shared trace,
# against vLLM's `vllm serve` defaults for the GPU (baseline=vllm). Re-running the same command resumes the
# study (the Optuna and MLflow stores live in /tmp/study-$NAME while the machine stays warm). A study that
# outlasts a machine travels: every run leaves $OUT/$NAME-state.tar.gz, and a fresh machine given it back as
# $STATE/$NAME-state.tar.gz (STATE defaults to .study, carried) resumes it there, the conclusion's kept
# measurements included (experiments/gpu_study_state.sh). Issue 30's check (the search simulated, the
# conclusion real) on a window of each trace, e.g. Azure's (400 requests from 1,800 s, the last half of their
# time held out, each window held for 30 s at least: with capacity_tol 0.1, 10% over capacity puts a server
# 2 s behind within 20 s):
#   bash experiments/gpu_capacity_study.sh trust-azure azure_llm_2023_code.csv 540 tuner.fidelity=sim+real \
#     executor=sim executor.profile=conf/profiles/h200-llama-3-8b.json runtime.scheduler.max_model_len=8192 \
#     replay.start_s=1800 replay.max_requests=400 validation.holdout_fraction=0.5 replay.min_window_s=30 \
#     tuner.capacity_tol=0.1 tuner.edge_checks=1 tuner.finalists=1 validation.select_rounds=1 \
#     validation.proof_rounds=2
# Simulated first on the CPU, `python -m experiments.study_cost` put its conclusion at about 25 minutes of
# replays (vLLM's defaults hold 1.3 req/s there: a passing replay of the search window takes 2.5 minutes), so it
# resumes over two or three calls and may need a second machine.
# A real measurement replays its window for at least replay.min_window_s a probe: a window of N requests whose
# capacity is C req/s takes about N / C seconds a passing probe, 5 to 7 probes a measurement, and
# finalists + 1 measurements a selection round and 2 a proof round (a conclusion of tuner.finalists=1,
# validation.select_rounds=1, validation.proof_rounds=2 is 6 measurements): size the window by that.
# Needs the tuner's wheels (.whl: ../shared/gpu/make-wheelhouse.sh) and the traces copied to .traces/ (carried),
# or already in $TRACES (a folder that outlives the call while the machine stays warm, e.g. /tmp/traces).
# Several studies can run at once, one per GPU: CUDA_VISIBLE_DEVICES=1 bash experiments/gpu_capacity_study.sh ...
#   bash experiments/gpu_capacity_study.sh NAME TRACE SECONDS [overrides...]     output under $OUT
set -o pipefail
name=${1:?name}; trace=${2:?trace file under .traces/}; seconds=${3:?wall-clock limit}; shift 3
traces=${TRACES:-$PWD/.traces}
[ -d /tmp/site/optuna ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1
dir=/tmp/study-$name
source experiments/gpu_study_state.sh
study_restore $name $dir
root=$PWD
cd $dir
start=$(date +%s)
timeout $seconds python3 -m tuner +traffic=$traces/$trace model=llama3-8b search=gpu \
  tuner.study_name=$name storage.url=sqlite:///$dir/optuna.db tracking.uri=sqlite:///$dir/mlflow.db \
  storage.heartbeat_interval_s=10 storage.grace_period_s=30 storage.max_retry=0 \
  replay.long_prompts=truncate hydra.run.dir=$dir/out "$@" 2>&1 | grep -v "INFO mlflow\|^$" | tee -a $OUT/$name.txt
echo "exit ${PIPESTATUS[0]}; wall seconds: $(( $(date +%s) - start ))" | tee -a $OUT/$name.txt
cp out/report.md $OUT/$name-report.md 2>/dev/null; cp out/best.yaml $OUT/$name-best.yaml 2>/dev/null
cp out/vllm.yaml $OUT/$name-vllm.yaml 2>/dev/null; cp out/plots/capacity.png $OUT/$name-capacity.png 2>/dev/null
cp out/pagetune.log $OUT/$name.log 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a $OUT/$name.txt
python3 -c "import torch, triton, optuna; print('torch', torch.__version__, 'triton', triton.__version__, 'optuna', optuna.__version__)" | tee -a $OUT/$name.txt
cd $root && study_save $name $dir
