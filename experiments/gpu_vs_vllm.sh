#!/usr/bin/env bash
# pagetune against vLLM on the H200 (issue 28). On a fresh checkout, `bash experiments/gpu_prep.sh` builds every
# folder carried below (.vllm, .whlmini, .traces, .old). Before the first call on a fresh machine, the vLLM wheel travels
# in parts (../shared/gpu/vllm-wheelhouse.sh .vllm makes five; then experiments/vllm_slim.sh .vllm makes three,
# without FlashAttention 2, which Hopper does not run; carry .vllm/pK and copy .vllm/pK/partK to /tmp in
# back-to-back calls). A part (59 MB) and the tracked tree (24 MB) exceed the 64 MiB a call carries: move the large
# tracked folder the GPU calls do not read aside for the burst and back after it,
#   mkdir -p /tmp/hold && mv experiments/results/h200-sim /tmp/hold/
#   ... the part calls and the calls below ...
#   mv /tmp/hold/h200-sim experiments/results/
# Then, carrying .vllm/deps .whlmini .traces:
#
#   bash experiments/gpu_vs_vllm.sh llama-3-8b uniform,mixed      # one model's workloads, within this call
#   bash experiments/gpu_vs_vllm.sh qwen2-7b azure-code --open-repeats 2
#   bash experiments/gpu_vs_vllm.sh all --open-repeats 2            # all three in one run of bench_vs_vllm
#       (KNOBS='{"block_size": 128}': pagetune's engine knobs, as JSON; THEN='COMMAND': a command run after it in the
#       same background session, e.g. 'python3 -m experiments.bench_prefill --heads 28 4 --warp-specialized --tma
#       --block-size 128 > $JOB/ws-tma.md')
#   bash experiments/gpu_vs_vllm.sh tails --open-repeats 2          # the TPOT tail's evidence (issue 28): torch's cuDNN
#       and flash SDPA against the prefill kernel (bench_prefill_sdpa), a profile of azure-code's chunk steps on
#       128-token pages (profile_workload), then `all` on 128-token pages, its notes pairing the engines' requests
#   bash experiments/gpu_vs_vllm.sh fa4 --open-repeats 2             # FlashAttention 4 as the prefill kernel (issue
#       28; its two parts first: experiments/fa4_wheelhouse.sh, copied to /tmp/fa4partK): its GPU tests, its kernel
#       against Triton's (bench_prefill_sdpa --paths fa4, 128-token pages), then azure-code and mixed on 128-token
#       pages: pagetune with Triton's prefill, pagetune with FA4's, vLLM, each a run of its own, every result in one
#       folder (bench/) so the table pairs all three; last, the kernels on 16-token pages (about 20 minutes with
#       --open-repeats 2; then `wait`).
#       ENGINES=pagetune: without vLLM (no vLLM parts), about 10 minutes. FA4_KERNELS=0: the end-to-end runs alone
#       (no tests, no kernel benches; about 14 minutes with vLLM and --open-repeats 3)
#   ENGINES=pagetune bash experiments/gpu_vs_vllm.sh pages          # page sizes 16 / 128 / 64 end to end, every
#       workload, and the GPU kernel tests, in one background run (about 15 minutes without vLLM; then `wait`)
#   ENGINES=pagetune bash experiments/gpu_vs_vllm.sh heap --open-repeats 3   # the open-loop stalls' cause: pagetune
#       with its startup heap frozen (the default) and with --thawed-heap, azure-code and mixed on 128-token pages,
#       each replay's collections in its JSON (`gc`) and the table's notes (about 8 minutes; with vLLM after them
#       when ENGINES is left out; then `wait`)
#   bash experiments/gpu_vs_vllm.sh profiles --open-repeats 3       # the simulator's profiles of this runtime,
#       both shipped models (runtime.profile, PROFILE_S seconds each, default 270), then pagetune's mixed open loop
#       on 128-token pages, heap frozen (about 13 minutes; .whlmini and .traces carried, no vLLM; then `wait`)
#   bash experiments/gpu_vs_vllm.sh wait                            # the next call, within 30 s of the last
#   bash experiments/gpu_vs_vllm.sh install                         # vLLM alone (for gpu_background.sh)
#   bash experiments/gpu_vs_vllm.sh install-mini | old-tree         # the replay's imports; /tmp/oldtree (below)
#   bash experiments/gpu_vs_vllm.sh azure-variants                  # azure-code: pagetune, vLLM, pagetune on
#       128-token pages (K/V by TMA), and pagetune with the kernels in .old/kernels (carried; see gpu_prefill_tma.sh): a kernel
#       change judged end to end beside its baseline, in one background run (about 10 minutes; then `wait`).
#       ENGINES=pagetune: without vLLM (no part burst; .whlmini and .traces carried), about 6 minutes.
#       PRE='COMMAND': a command run first in the same background session (e.g. 'bash experiments/gpu_prefill_tma.sh')
#
# `all` runs longer than a call may (about 16 minutes with two open-loop replays): experiments/gpu_background.sh
# runs it in a session of its own and `wait` (carrying nothing) collects it: $OUT/vs.tar.gz.
# .whlmini holds the tuner's imports the image lacks for the replay (hydra-core, omegaconf, antlr4);
# .traces/azure_llm_2023_code.csv the Azure code trace (../shared/traces does not travel).
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
here=$(dirname "$0")

install() {
  if [ ! -d /tmp/vsite/vllm ]; then
    cat /tmp/part[0-9] > /tmp/vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl  # three parts (vllm_slim.sh) or five
    # a wheel in both folders (gguf) stops pip: .whlmini's only where .vllm/deps lacks that distribution
    mini=$(for w in .whlmini/*.whl; do ls .vllm/deps/"$(basename "$w" | cut -d- -f1)"-* >/dev/null 2>&1 || echo "$w"; done)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite \
      /tmp/vllm-0.26.0-*.whl .vllm/deps/*.whl $mini 2>&1 | tail -3
  fi
  python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
}

install_fa4() {  # FlashAttention 4 into a folder of its own: /tmp/fa4site (fa4_wheelhouse.sh says why)
  if [ ! -d /tmp/fa4site/flash_attn ]; then
    mkdir -p /tmp/fa4whl && cat /tmp/fa4part[0-9] | tar -x -C /tmp/fa4whl || return 1
    # each wheel unpacked as it is (none places files elsewhere); nvidia-cutlass-dsl's .pth, which puts
    # nvidia_cutlass_dsl/dsl_packages (the cutlass package) on the path, is not read from PYTHONPATH: $fa names it
    for w in /tmp/fa4whl/*.whl; do python3 -m zipfile -e "$w" /tmp/fa4site || return 1; done
  fi
  PYTHONPATH=/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH python3 -c "import flash_attn.cute, cutlass; print('flash_attn.cute', cutlass.__version__)"
}

install_mini() {  # the replay's imports alone, where vLLM does not run
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/vsite .whlmini/*.whl
}

old_tree() {  # this tree with the kernels of .old/kernels, at /tmp/oldtree: the baseline of a kernel change
  rm -rf /tmp/oldtree && mkdir -p /tmp/oldtree
  tar --exclude=./.vllm -cf - . | tar -xf - -C /tmp/oldtree && cp -r .old/kernels/. /tmp/oldtree/kernels/
}

install_engines() {  # vLLM where it runs; the replay's imports alone for ENGINES=pagetune
  if [ "$engines" = pagetune ]; then install_mini; else install; fi
}

engines=${ENGINES:-pagetune,vllm}
trace=$PWD/.traces/azure_llm_2023_code.csv
bench="python3 -m experiments.bench_vs_vllm --trace $trace"
azure="$bench --model qwen2-7b --workloads azure-code --open-repeats 2"
p128="--tag pages128 --knobs '{\"block_size\": 128}'"
k128='{"block_size": 128}' k128fa4='{"block_size": 128, "prefill_kernel": "fa4"}'  # pagetune's knobs, JSON
export PYTHONPATH=/tmp/vsite:$PWD PYTHONUNBUFFERED=1 VLLM_LOGGING_LEVEL=WARNING
case "${1:?model, all, tails, fa4, heap, pages, profiles, azure-variants, wait, install, install-fa4, install-mini or old-tree}" in
  install) install ;;
  install-fa4) install_fa4 ;;
  install-mini) install_mini ;;
  old-tree) old_tree ;;
  all)
    shift; install || exit 1
    bash "$here/gpu_background.sh" start vs \
      "$bench --out \$JOB $*${KNOBS:+ --knobs '$KNOBS'}" \
      ${THEN:+"$THEN"} ;;
  azure-variants)
    shift; install_engines || exit 1
    old_tree && old=/tmp/oldtree
    run="$azure --out \$JOB $*"
    bash "$here/gpu_background.sh" start vs ${PRE:+"$PRE"} "$run --engines $engines" "$run --engines pagetune $p128" \
      "cd $old && $run --engines pagetune --tag old-kernels" ;;
  pages)  # page sizes 16 / 128 / 64 end to end, and the GPU kernel tests; ENGINES=pagetune: without vLLM
    shift; install_engines || exit 1
    q="$azure --out \$JOB $*"
    l="$bench --model llama-3-8b --workloads uniform,mixed --open-repeats 2 --out \$JOB $*"
    bash "$here/gpu_background.sh" start vs "$q --engines $engines" "$q --engines pagetune $p128" \
      "timeout 240 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu.py" \
      "$l --engines $engines" "$l --engines pagetune $p128" \
      "$q --engines pagetune --tag pages64 --knobs '{\"block_size\": 64}'" ;;
  tails)  # the TPOT tail's evidence, one background run (about 20 minutes; then `wait`)
    shift; install || exit 1
    bash "$here/gpu_background.sh" start vs \
      "python3 -m experiments.bench_prefill_sdpa > \$JOB/sdpa.md 2>&1" \
      "python3 -m experiments.profile_workload --model qwen2-7b --trace $trace \
         --steps 20:32,700:720 --knobs '{\"block_size\": 128}' --out \$JOB/profile" \
      "$bench --out \$JOB $* --knobs '{\"block_size\": 128}'" ;;
  fa4)  # FlashAttention 4 as the prefill kernel beside Triton's and vLLM (about 20 minutes; then `wait`)
    shift; install_engines && install_fa4 || exit 1
    fa="PYTHONPATH=/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH"
    both="--out \$JOB/../bench --workloads azure-code,mixed $*"  # one folder beside the jobs': one table pairs all three
    # pagetune's two prefill kernels first, vLLM after them: a run cut short by the device's budget keeps the pair
    # measured on one machine
    jobs=()
    [ "${FA4_KERNELS:-1}" = 0 ] || jobs+=(
          "$fa timeout 300 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu.py -k fa4 -rs"
          "$fa python3 -m experiments.bench_prefill_sdpa --paths fa4 > \$JOB/fa4-pages128.md 2>&1")
    jobs+=("$bench $both --engines pagetune --knobs '$k128'"
           "$fa $bench $both --engines pagetune --tag fa4 --knobs '$k128fa4'")
    [ "$engines" = pagetune ] || jobs+=("$bench $both --engines vllm")
    [ "${FA4_KERNELS:-1}" = 0 ] ||
      jobs+=("$fa python3 -m experiments.bench_prefill_sdpa --paths fa4 --block-size 16 > \$JOB/fa4-pages16.md 2>&1")
    bash "$here/gpu_background.sh" start vs "${jobs[@]}" ;;
  heap)  # the startup heap frozen (the default) and left to the collector, azure-code and mixed on 128-token pages
    shift; install_engines || exit 1
    both="$bench --out \$JOB/../bench --workloads azure-code,mixed --engines pagetune --knobs '$k128' $*"
    jobs=("$both" "$both --thawed-heap --tag thawed")
    [ "$engines" = pagetune ] || jobs+=("$bench --out \$JOB/../bench --workloads azure-code,mixed --engines vllm $*")
    bash "$here/gpu_background.sh" start vs "${jobs[@]}" ;;
  profiles)  # the simulator's profiles of this runtime (both shipped models, the full grid: 8-128-token pages),
    # then pagetune's mixed open loop on 128-token pages with its heap frozen (the stalls' check), pagetune alone
    shift; install_mini || exit 1
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -o 'H[0-9]\+' | head -1 | tr 'H' 'h')
    bash "$here/gpu_background.sh" start vs \
      "python3 -m runtime.profile model=llama-3-8b out=\$JOB/$gpu-llama-3-8b.json budget_s=${PROFILE_S:-270}" \
      "python3 -m runtime.profile model=qwen2-7b out=\$JOB/$gpu-qwen2-7b.json budget_s=${PROFILE_S:-270}" \
      "$bench --out \$JOB/../bench --workloads mixed --engines pagetune --knobs '$k128' $*" ;;
  wait) bash "$here/gpu_background.sh" wait vs ;;
  *)
    model=$1; workloads=${2:?workloads}; shift 2
    install || exit 1
    python3 -m experiments.bench_vs_vllm --model "$model" --workloads "$workloads" \
      --trace .traces/azure_llm_2023_code.csv --out "$out/bench" "$@" 2>&1 \
      | grep -v -E "^\s*$|it/s\]|Capturing|Processed prompts|^ERROR .*async_llm|Task was destroyed|^task: " \
      | tee "$out/bench.log" | tail -60 ;;
esac
