#!/usr/bin/env bash
# Issue 33 on two H200s (`nvidia-h200-x2`): tensor parallelism measured. NOT YET RUN: no two-GPU machine was lent
# when it was written. In order, each step's output under $OUT:
#   1. tests: the tensor-parallel tests, CPU (gloo) and CUDA (NCCL: a group of one; two GPUs: TP 2 = TP 1 in fp32,
#      a killed rank stops the engine)
#   2. the all-reduce's cost at TP 2 (NCCL, bf16) measured into a copy of the H200 profile ($OUT/h200-llama-3-8b-tp.json,
#      to ship as conf/profiles/h200-llama-3-8b.json: the simulator then no longer uses its unmeasured estimate)
#   3. offline throughput, Llama-3-8B shape: TP 2 against TP 1 x 2 replicas, pagetune and vLLM 0.26.0
#      (experiments/bench_tp.py, uniform and mixed workloads)
#   4. capacity on a window of each shared trace: the simulated shape study (devices=2, the measured all-reduce), and
#      the TP 2 server measured over HTTP (`replay.target`) for pagetune (`python -m runtime.serve`) and vLLM
#      (`vllm serve --tensor-parallel-size 2`). TP 1 x 2 replicas over HTTP needs a balancer in front of two servers,
#      which is not built: its capacity is the simulated one.
#
# Needs on the host, as experiments/gpu_vllm_study.sh: the tuner's wheels (.whl, ../shared/gpu/make-wheelhouse.sh),
# the traces in .traces/ (carried), vLLM 0.26.0 under /tmp/vsite (../shared/gpu/vllm-wheelhouse.sh and experiments/vllm_slim.sh:
# three parts over back-to-back calls; `gpu_vs_vllm.sh install`). Run: bash experiments/gpu_tp.sh [STEPS, default "1 2 3 4"]
set -o pipefail
steps=${1:-"1 2 3 4"}
out=${OUT:-/tmp/out}; mkdir -p "$out"
traces=${TRACES:-$PWD/.traces}
[ -d /tmp/site/optuna ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/vsite:/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$out/gpus.txt"
model=/tmp/vllm-llama-3-8b
[ -f $model/tokenizer.json ] || python3 experiments/vllm_model_dir.py llama-3-8b $model

for step in $steps; do case $step in
1) python3 -m pytest tests/runtime/distributed tests/runtime/serve/test_tensor_parallel_server.py -q -rs \
     2>&1 | tee "$out/tests.txt" | tail -15 ;;
2) cp conf/profiles/h200-llama-3-8b.json "$out/h200-llama-3-8b-tp.json"
   python3 -m runtime.distributed.allreduce "$out/h200-llama-3-8b-tp.json" --degrees 2 2>&1 | tee "$out/allreduce.txt" ;;
3) (cd experiments && python3 bench_tp.py --model llama-3-8b --workloads uniform,mixed --engines pagetune,vllm \
     --vllm-model-dir $model --out "$out/bench-tp") 2>&1 | grep -v -E "^\s*$|it/s\]|Capturing" | tee "$out/bench-tp.txt" ;;
4) profile="$out/h200-llama-3-8b-tp.json"; [ -f "$profile" ] || profile=conf/profiles/h200-llama-3-8b.json
   for trace in azure_llm_2023_code.csv mooncake_fast25_synthetic_trace.jsonl; do
     window=(replay.duration_s=1800 replay.sample=0.02); [[ $trace == mooncake* ]] && window=(replay.max_requests=2000)
     common=(+traffic=$traces/$trace model=llama3-8b runtime.scheduler.max_model_len=8192 replay.long_prompts=truncate
             "${window[@]}" tuner.capacity_tol=0.1 storage.url=sqlite:////tmp/tp.db tracking.uri=sqlite:////tmp/tp-mlflow.db)
     python3 -m tuner "${common[@]}" executor=sim executor.profile="$profile" devices=2 tuner.n_trials=12 \
       tuner.study_name=tp-sim-${trace%%.*} hydra.run.dir="$out/sim-${trace%%.*}" 2>&1 | tail -25 | tee "$out/sim-${trace%%.*}.txt"
     printf 'runtime:\n  model: {name: llama-3-8b}\n  tensor_parallel_size: 2\n  scheduler: {max_model_len: 8192}\n' > /tmp/tp2.yaml
     python3 -m runtime.serve --config /tmp/tp2.yaml --port 8100 > "$out/serve-tp2.log" 2>&1 & server=$!
     until curl -sf localhost:8100/health >/dev/null; do sleep 5; kill -0 $server || break; done
     python3 -m tuner "${common[@]}" replay.target=http://127.0.0.1:8100/v1 tuner.n_trials=1 \
       tuner.study_name=tp-ours-${trace%%.*} hydra.run.dir="$out/ours-${trace%%.*}" 2>&1 | tail -15 | tee "$out/ours-${trace%%.*}.txt"
     kill -INT $server; wait $server
     python3 -m vllm.entrypoints.cli.main serve $model --tensor-parallel-size 2 --load-format dummy --max-model-len 8192 \
       --port 8101 > "$out/vllm-tp2.log" 2>&1 & server=$!
     until curl -sf localhost:8101/health >/dev/null; do sleep 5; kill -0 $server || break; done
     python3 -m tuner "${common[@]}" replay.target=http://127.0.0.1:8101/v1 tuner.n_trials=1 \
       tuner.study_name=tp-vllm-${trace%%.*} hydra.run.dir="$out/vllm-${trace%%.*}" 2>&1 | tail -15 | tee "$out/vllm-${trace%%.*}.txt"
     kill -INT $server; wait $server
   done ;;
esac; done
