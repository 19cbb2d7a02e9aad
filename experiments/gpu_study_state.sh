# Sourced by the GPU study scripts: a study's state (the Optuna and MLflow stores, the output folder, the
# conclusion's kept measurements with them; a few MB) carried from one machine to the next, since a study on the
# real runtime or on vLLM outlasts one machine (30 minutes held at most, a session's device time).
#   study_restore NAME DIR   DIR (/tmp/study-NAME) from $STATE/NAME-state.tar.gz (STATE defaults to .study,
#                            carried) when the machine does not have it yet; the same command then resumes
#   study_save NAME DIR      DIR as $OUT/NAME-state.tar.gz (what `vllm serve` wrote under DIR/vllm left out):
#                            copy it into .study/ here and carry .study on the next machine's call
study_restore() {
  local state=${STATE:-$PWD/.study}/$1-state.tar.gz
  if [ ! -d "$2" ] && [ -f "$state" ]; then
    tar -xzf "$state" -C "$(dirname "$2")" && echo "resuming $1 from $state"
  fi
  mkdir -p "$2"
}

study_save() {
  tar -czf "$OUT/$1-state.tar.gz" -C "$(dirname "$2")" --exclude="$(basename "$2")/vllm" "$(basename "$2")"
}
