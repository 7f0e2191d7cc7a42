# shellcheck shell=bash
# The per-model loop bench/torch.sh and bench/gpu.sh share. Sourced after lib/common.sh,
# never run. For each model: a fresh `rw-node --role rack-agg` on 127.0.0.1, then
# apps/examples/torch/compare.py with the calling script's `train_args MODEL`, then the
# node stopped. Every system's JSON object goes to $tmp/results.jsonl (a model that
# failed: one {"model", "error"} object, its stderr's end on ours, $failures counted; a
# node that died of a fault fails its model too). Uses the calling script's globals:
# models, systems, workers, run_timeout, py, tmp, node_pid, run_pid, failures, json;
# and, where it defines one, systems_for MODEL (the systems to run for that model).
#
#   check_torch_options MODEL...         usage errors for --workers, --timeout, a model
#                                        not among MODEL..., a system not among server
#                                        hook ddp local
#   train_models NODE_BINARY [--print]   (--print: under --json, each model's objects
#                                         on stdout as it ends)
check_torch_options() {
  local m s
  [[ $workers =~ ^[1-9][0-9]*$ ]] || usage_error "bad --workers $workers"
  [[ $run_timeout =~ ^[1-9][0-9]*$ ]] || usage_error "bad --timeout $run_timeout"
  for m in $models; do
    [[ " $* " == *" $m "* ]] || usage_error "unknown model $m (of: $*)"
  done
  for s in $systems; do
    [[ " server hook ddp local " == *" $s "* ]] ||
      usage_error "unknown system $s (of: server hook ddp local)"
  done
}

train_models() {
  local node_bin=$1 print=${2:-} model st model_systems
  : >"$tmp/results.jsonl"
  for model in $models; do
    rm -f "$tmp/port"
    timeout -k 5 $((run_timeout + 30)) "$node_bin" --role rack-agg \
      --listen 127.0.0.1:0 --port-file "$tmp/port" >"$tmp/node-$model.log" 2>&1 </dev/null &
    node_pid=$!
    wait_for_port "$tmp/port" "$node_pid" ||
      { note "rw-node did not start:"; cat "$tmp/node-$model.log" >&2; exit 1; }
    st=0
    model_systems=$systems # a script may leave systems out per model (systems_for MODEL)
    if declare -F systems_for >/dev/null; then model_systems=$(systems_for "$model"); fi
    model_systems=$(echo $model_systems) # one space between, none around
    # shellcheck disable=SC2046 # the options split on purpose
    timeout -k 5 "$run_timeout" $py apps/examples/torch/compare.py --connect "$(<"$tmp/port")" \
      --model "$model" --systems "${model_systems// /,}" --workers "$workers" --json \
      --curves "$tmp/curves" -- $(train_args "$model") \
      >"$tmp/$model.jsonl" 2>"$tmp/$model.err" </dev/null &
    run_pid=$!
    wait "$run_pid" || st=$?
    run_pid=
    if ! stop_pids "$node_pid"; then ((st)) || st=1; fi # the node died of a fault
    node_pid=
    if ((st != 0)); then
      note "$model failed (exit $st):"; tail -n 12 "$tmp/$model.err" | sed 's/^/    /' >&2
      failures=$((failures + 1))
      echo "{\"model\": \"$model\", \"error\": \"exit $st\"}" >>"$tmp/results.jsonl"
      continue
    fi
    grep "^$model/.*test accuracy" "$tmp/$model.err" | sed 's/^/  /' >&2 || true
    cat "$tmp/$model.jsonl" >>"$tmp/results.jsonl"
    if [[ $print == --print ]] && ((json)); then cat "$tmp/$model.jsonl"; fi
  done
}
