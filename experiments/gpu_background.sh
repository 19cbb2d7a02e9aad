#!/usr/bin/env bash
# Commands that together outlast a device call (10 minutes), run one after another in a session of their own,
# which lives on while the machine stays warm (30 s after a call; 30 minutes held at most). Output under $OUT.
#
#   bash experiments/gpu_background.sh start NAME 'COMMAND' ['COMMAND' ...]   # starts them, waits up to WAIT_S
#   bash experiments/gpu_background.sh wait NAME                              # the next call, within 30 s
#
# Each command runs from the tree's root under bash with JOB set to its own folder (/tmp/bg-NAME/K, K = 1, 2,
# ...), its output in JOB/log, its exit status in JOB/rc. `start` and `wait` return when every command has ended
# or after WAIT_S seconds (default 560): the logs' last lines, and NAME.tar.gz under $OUT holding every job
# folder as it stands (a call brings back at most 8 files); each log line cut to WIDTH (200) characters, so the
# reply reads quickly: the machine is released 30 s after a call. Environment (PYTHONPATH and the like) is the
# caller's, exported before `start`. Example, the issue-28 session (vLLM installed by gpu_vs_vllm.sh):
#   bash experiments/gpu_vs_vllm.sh install && export PYTHONPATH=/tmp/vsite:$PWD PYTHONUNBUFFERED=1 &&
#   bash experiments/gpu_background.sh start s28 \
#     'python3 -m experiments.bench_vs_vllm --trace .traces/azure_llm_2023_code.csv --out $JOB --open-repeats 2' \
#     'python3 -m runtime.profile model=llama-3-8b out=$JOB/h200-llama-3-8b.json budget_s=420'
set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p "$out"
verb=${1:?start or wait}; name=${2:?name}; shift 2
dir=/tmp/bg-$name

report() {  # until every command has ended or WAIT_S pass; then what is there comes back
  for _ in $(seq "${WAIT_S:-560}"); do [ -f $dir/done ] && break; sleep 1; done
  for job in $dir/[0-9]*; do
    [ -d "$job" ] || continue
    echo "== $(basename "$job"): $(cat "$job/cmd")"
    # short lines: the next call must come within 30 s of this one's end, reading included
    tail -n "${TAIL:-15}" "$job/log" 2>/dev/null | grep -v -E "it/s\]|Capturing|Processed prompts" | cut -c1-"${WIDTH:-200}"
    [ -f "$job/rc" ] && echo "-- exit $(cat "$job/rc")"
  done
  tar -czf "$out/$name.tar.gz" -C /tmp "bg-$name"
  if [ -f $dir/done ]; then echo "all ended"; else echo "still running: call 'bash $0 wait $name' within 30 s"; fi
}

case "$verb" in
  start)
    [ $# -gt 0 ] || { echo "start: no command given" >&2; exit 2; }
    rm -rf $dir && mkdir -p $dir
    k=0
    for cmd in "$@"; do k=$((k + 1)); mkdir -p $dir/$k; printf '%s\n' "$cmd" > $dir/$k/cmd; done
    # its own session: the call's end does not kill it
    setsid bash -c "for job in \$(ls -d $dir/[0-9]* | sort -t/ -k4 -n); do
        JOB=\$job bash -c \"\$(cat \$job/cmd)\" > \$job/log 2>&1; echo \$? > \$job/rc
      done; touch $dir/done" < /dev/null > /dev/null 2>&1 &
    report ;;
  wait)
    [ -d $dir ] || { echo "no run $name on this machine (a fresh machine starts bare)"; exit 1; }
    report ;;
  *) echo "usage: $0 start NAME 'COMMAND' ... | wait NAME" >&2; exit 2 ;;
esac
