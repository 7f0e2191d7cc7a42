#!/usr/bin/env bash
# The many-core check (issue 36) and the GPU check (issue 37), as run on the 16-core GPU
# machine through the device tool: one call, nothing of ours installed there, every
# figure written to OUT as it comes (a cut-off run still returns what it measured).
#
#   bash bench/many-core.sh --out DIR --new BUNDLE [--old BUNDLE] [--stages "..."]
#                           [--budget S] [--smoke]
#   bash bench/many-core.sh --smoke --build-dir BUILD [--stages ...]   (the suite's smoke:
#                           BUILD packed into a temporary bundle, OUT a temporary folder)
#
# BUNDLE: a build packed by bench/bundle.sh (e.g. build-bundle/new, build-bundle/old,
# carried with the checkout). OUT gets run.log (the facts and every stage's log),
# results.jsonl (every JSON line, with its "stage"), RESULTS.md (with the sections the
# stages wrote) and py-headers.tgz: four files, as the device tool returns at most
# eight. Stages, each bounded in time:
#   facts      the machine: cores, NUMA, CPU, GPU, python, torch, MPI
#   scale      bench/scale.sh on NEW: W 2 4 8 14 x 4MiB 64MiB, every system
#   old        rackweave-tcp and -shm of OLD, same cells (no RESULTS.md)
#   pollers    rackweave-tcp of NEW at W 8 14 x 64MiB with --pollers 1 2 8
#   shards     rackweave-tcp and -shm of NEW at W 4 8 x 4MiB with --shards 4
#   repeat     one more run: rackweave-tcp, rackweave-shm, gloo and torch-gloo of NEW at
#              W 4 8 14 x 64MiB (name it twice for two; with scale's, three runs of
#              each target cell)
#   repeat-small  one more run of the same systems and mpi-shm at W 2 4 8 14 x 4MiB
#              (the cells where RackWeave's best is judged against the best peer)
#   verify     rackweave-tcp and -shm of NEW at W 4 8 14 x 4MiB 64MiB with rw-bench
#              --verify: every result bitwise the rank-order sum (a row fails if not)
#   trace      bench/trace.sh on NEW: what --trace costs, 3 pairs at W 4 x 64MiB
#   job-shards rackweave-shm and -tcp of NEW at W 4 8 14 x 4MiB with --job-kib-per-shard
#              0 (every shard), 256, 1024 (auto's) and 4096: what touching fewer shards
#              gives a small job
#   fabric     rackweave-tcp and rackweave-fabric (libfabric's tcp provider) of NEW at
#              W 4 x 64MiB, every result --verify'ed: with the defaults (auto fabric
#              endpoints per NIC), then with --fabric-endpoints 1
#   sweep      rackweave-tcp of NEW at W 8 14 x 64MiB: the defaults, then one
#              change each (push window, chunk size, shards, pollers)
#   gpu        one run of bench/gpu.sh on NEW: ResNet-18 on the GPU, 4 ranks, through
#              ServerOptimizer, the DDP hook, torch DDP over gloo and no exchange, then
#              the state_dict resume check (lines tagged with the run; the last run's
#              section in RESULTS.md)
#   headers    Python's and torch's pybind11 headers (to build the extension here)
# --stages: which to run, in that order; a stage named twice runs twice, each run's
# lines tagged "run" (default: "facts scale old pollers shards repeat repeat verify
# trace headers", old only with --old). --budget S: a stage that might not end within
# S seconds of the start (its own time limit counted) is not started, and the run fails
# saying so, so that the device tool's call returns with every figure measured until
# then.
# --smoke: W = 2 at 1MiB, 2 iterations, each stage a few seconds (gpu: gpu.sh --smoke,
# about a minute, on the CPU), to check the script on this machine before spending
# device time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

out= new= old= smoke=0 build= budget=0 stages_given=0
stages="facts scale old pollers shards repeat repeat verify trace headers"
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --stages) stages=$2 stages_given=1; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    -h|--help) sed -n 2,49p "$0"; exit 0 ;;
    *) echo "many-core.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ $budget =~ ^[0-9]+$ ]] || { echo "many-core.sh: --budget takes whole seconds" >&2; exit 2; }
for s in $stages; do
  case $s in
    facts|scale|old|pollers|shards|repeat|repeat-small|verify|trace|job-shards|fabric|sweep|gpu|headers) ;;
    *) echo "many-core.sh: unknown stage $s" >&2; exit 2 ;;
  esac
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [[ -z $new && -n $build ]]; then # a build, not a bundle: pack it first
  bash bench/bundle.sh "$scratch/bundle" --build-dir "$build" --name new >&2 ||
    { echo "many-core.sh: bench/bundle.sh failed" >&2; exit 1; }
  new=$scratch/bundle/new
fi
[[ -z $out ]] && ((smoke)) && out=$scratch/out
[[ -n $out && -n $new ]] || { echo "many-core.sh: --out and --new (or --smoke --build-dir) are needed" >&2; exit 2; }
[[ -f $new/BUNDLE ]] || { echo "many-core.sh: $new is not a bundle (bench/bundle.sh)" >&2; exit 2; }
mkdir -p "$out"

workers="2 4 8 14" sizes="4MiB 64MiB" iters=8 warmup=2
big_w="8 14" small_w="4 8" big=64MiB small=4MiB shards=4 results=() target_w="4 8 14"
if ((smoke)); then
  workers=2 sizes=1MiB iters=2 warmup=1 big_w=2 small_w=2 big=1MiB small=1MiB shards=1
  target_w=2
  results=(--no-results)
fi
work=$scratch/work
mkdir -p "$work"
exec 2> >(tee -a "$out/run.log" >&2)
: >"$out/results.jsonl"
failed=0
declare -A runs=()
# keep STAGE: its JSON lines into results.jsonl, tagged with the stage (and the run,
# for a stage named more than once); its log into run.log.
keep() {
  local tag="\"stage\":\"$1\"," n=0 s
  for s in $stages; do [[ $s == "$1" ]] && n=$((n + 1)); done
  ((n > 1)) && tag+="\"run\":${runs[$1]},"
  sed "s/^{/{$tag/" "$work/$1.jsonl" >>"$out/results.jsonl"
  cat "$work/$1.log" >>"$out/run.log"
}
# peers NAME LIMIT PEERS-ARGS...: bench/peers.sh on NEW within LIMIT seconds, its JSON
# lines (each with $extra, e.g. '"pollers":2,', in front) and log into NAME's; a failure
# says its status, time and the end of its log.
extra=
peers() {
  local name=$1 limit=$2 started=$SECONDS rc
  shift 2
  timeout -k 10 "$limit" bash bench/peers.sh --build-dir "$new" --iters "$iters" \
    --warmup "$warmup" --timeout 60 --json --no-results "$@" \
    >"$work/$name.part" 2>>"$work/$name.log"
  rc=$?
  sed "s/^{/{$extra/" "$work/$name.part" >>"$work/$name.jsonl"
  if ((rc != 0)); then # why, here: the folder goes away with the run
    failed=1
    echo "$name: peers.sh $* exited $rc after $((SECONDS - started)) s (124: the" \
      "$limit s limit); the end of its log:" >&2
    tail -n 15 "$work/$name.log" >&2
  fi
  return "$rc"
}

stage_facts() {
  echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "NUMA domains: $(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)"
  echo "/dev/shm: $(df -h /dev/shm 2>/dev/null | tail -1); ulimit -n: $(ulimit -n)"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel: $(uname -sr); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  for py in /usr/bin/python3 python3; do # the one with torch, as peers.sh picks it
    "$py" -c 'import torch' 2>/dev/null || continue
    echo "python: $("$py" --version 2>&1); torch: $("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
    break
  done
  echo "mpirun: $(mpirun --version 2>&1 | sed -n 1p)" # sed reads it all: no SIGPIPE
  echo "new: $(head -1 "$new/BUNDLE")"
  [[ -n $old ]] && echo "old: $(head -1 "$old/BUNDLE")"
  return 0
}

stage_scale() {
  timeout -k 10 "$1" bash bench/scale.sh --build-dir "$new" --workers "$workers" \
    --bytes "$sizes" --iters "$iters" --warmup "$warmup" --timeout 60 --json \
    ${results[@]+"${results[@]}"} >"$work/scale.jsonl" 2>"$work/scale.log" ||
    { failed=1; echo "scale failed" >&2; }
}

stage_old() { # asked for by name without --old, a failure; by default, left out
  if [[ -z $old ]]; then
    echo "old: no --old bundle, nothing to run" >&2
    ((stages_given)) && failed=1
    return 0
  fi
  timeout -k 10 "$1" bash bench/peers.sh --build-dir "$old" --workers "$workers" \
    --bytes "$sizes" --iters "$iters" --warmup "$warmup" --timeout 60 --json --no-results \
    --systems "rackweave-tcp rackweave-shm" >"$work/old.jsonl" 2>"$work/old.log" ||
    { failed=1; echo "old failed" >&2; }
}

stage_pollers() {
  local p
  for p in 1 2 8; do
    extra="\"pollers\":$p," peers pollers 40 --workers "$big_w" --bytes "$big" \
      --systems rackweave-tcp --node-args "--pollers $p"
  done
}

stage_shards() {
  peers shards "$1" --workers "$small_w" --bytes "$small" \
    --systems "rackweave-tcp rackweave-shm" --node-args "--shards $shards"
}

stage_repeat() {
  peers repeat "$1" --workers "$target_w" --bytes "$big" \
    --systems "rackweave-tcp rackweave-shm gloo torch-gloo"
}

stage_repeat-small() {
  local systems="rackweave-tcp rackweave-shm gloo torch-gloo"
  command -v mpirun >/dev/null && systems+=" mpi-shm"
  peers repeat-small "$1" --workers "$workers" --bytes "$small" --systems "$systems"
}

stage_verify() {
  local it=$iters
  iters=$((smoke ? 2 : 3))
  peers verify "$1" --workers "$target_w" --bytes "$sizes" \
    --systems "rackweave-tcp rackweave-shm" --bench-args "--verify"
  iters=$it
}

stage_job-shards() {
  local kib
  for kib in 0 256 1024 4096; do
    extra="\"job_kib_per_shard\":$kib," peers job-shards 40 --workers "$target_w" \
      --bytes "$small" --systems "rackweave-shm rackweave-tcp" \
      --node-args "--job-kib-per-shard $kib"
  done
}

stage_fabric() { # the defaults (auto endpoints per NIC), then one endpoint, as before
  local n
  for n in auto 1; do
    extra="\"fabric_endpoints\":\"$n\"," peers fabric $(($1 / 2)) \
      --workers "$(((smoke)) && echo 2 || echo 4)" --bytes "$big" \
      --systems "rackweave-tcp rackweave-fabric" --bench-args "--verify" \
      --node-args "--fabric-endpoints $n"
  done
}

stage_trace() { # its report goes to the log; its RESULTS.md section into OUT's copy
  timeout -k 10 "$1" bash bench/trace.sh --build-dir "$new" \
    $( ((smoke)) && echo --smoke || echo --pairs 3) >"$work/trace.log" 2>&1 ||
    { failed=1; echo "trace failed" >&2; }
}

stage_sweep() {
  local variants=("defaults|||" "window0||--push-window 0" "window2M||--push-window 2MiB"
    "window8M||--push-window 8MiB" "chunk256K||--chunk-bytes 256KiB"
    "chunk1M||--chunk-bytes 1MiB" "shards6|--shards 6|" "pollers6|--pollers 6|"
    "chunk256K-window4M||--chunk-bytes 256KiB --push-window 4MiB") v name nargs bargs
  for v in "${variants[@]}"; do
    IFS='|' read -r name nargs bargs _ <<<"$v"
    echo "-- $name: node [$nargs] bench [$bargs]" >>"$work/sweep.log"
    extra="\"variant\":\"$name\"," peers sweep 40 --workers "$big_w" --bytes "$big" \
      --systems rackweave-tcp ${nargs:+--node-args "$nargs"} ${bargs:+--bench-args "$bargs"}
  done
}

stage_gpu() { # one run; its section.md goes into RESULTS.md through gpu.sh itself
  local dir=$work/gpu-out rc
  rm -rf "$dir"
  if ((smoke)); then
    timeout -k 10 "$1" bash bench/gpu.sh --smoke --build-dir "$new" --out "$dir" --json
  else
    timeout -k 10 "$1" bash bench/gpu.sh --build-dir "$new" --models resnet18 \
      --workers 4 --timeout 150 --out "$dir" --json
  fi >"$work/gpu.jsonl" 2>"$work/gpu.log"
  rc=$?
  # gpu.sh prints its JSON lines on stdout (with its report); results.jsonl has them alone
  if [[ -f $dir/results.jsonl ]]; then cp "$dir/results.jsonl" "$work/gpu.jsonl"
  else grep '^{' "$work/gpu.jsonl" >"$work/gpu.jsonl.tmp"; mv "$work/gpu.jsonl.tmp" "$work/gpu.jsonl"; fi
  [[ -f $dir/run.log ]] && cat "$dir/run.log" >>"$work/gpu.log"
  ((rc == 0)) || { failed=1; echo "gpu: bench/gpu.sh exited $rc" >&2; tail -n 20 "$work/gpu.log" >&2; }
}

stage_headers() {
  local torch_inc py_inc
  ((smoke)) && return 0
  torch_inc=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))' 2>/dev/null)
  py_inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
  if [[ -d $torch_inc/pybind11 && -d $py_inc ]]; then
    tar czf "$out/py-headers.tgz" -C / "${py_inc#/}" "${torch_inc#/}/pybind11" 2>/dev/null &&
      echo "py-headers.tgz: $py_inc, $torch_inc/pybind11 ($(du -h "$out/py-headers.tgz" | cut -f1))" >&2
  fi
}

# Each stage's time limit in seconds (smoke, full); the loops' inner calls have their own.
limit_of() {
  case $1 in
    facts|headers) echo 30 ;;
    scale) echo $((smoke ? 120 : 200)) ;;
    old) echo $((smoke ? 60 : 80)) ;;
    pollers) echo 150 ;;
    shards) echo 40 ;;
    repeat) echo $((smoke ? 60 : 75)) ;;
    repeat-small) echo $((smoke ? 60 : 100)) ;;
    verify) echo $((smoke ? 60 : 150)) ;;
    trace) echo $((smoke ? 60 : 120)) ;;
    fabric) echo $((smoke ? 120 : 90)) ;;
    job-shards) echo 170 ;;
    sweep) echo 400 ;;
    gpu) echo $((smoke ? 240 : 200)) ;;
  esac
}

for s in $stages; do
  runs[$s]=$((${runs[$s]:-0} + 1))
  limit=$(limit_of "$s")
  if ((budget > 0 && SECONDS + limit > budget)); then
    echo "== $s (run ${runs[$s]}) NOT RUN: $SECONDS s in, its limit $limit s would pass the" \
      "--budget of $budget s" >&2
    failed=1
    continue
  fi
  echo "== $s, run ${runs[$s]} ($(date -u +%T), $SECONDS s in, limit $limit s)" >&2
  : >"$work/$s.jsonl"; : >"$work/$s.log"
  if [[ $s == facts ]]; then stage_facts >&2; else "stage_$s" "$limit"; fi
  keep "$s"
  # The sections the stages wrote (scale, trace, gpu), for bench/RESULTS.md here: copied
  # after every stage, so that a run cut off still returns them.
  ((smoke)) || cp bench/RESULTS.md "$out/RESULTS.md"
done
grep -hE '^peers.sh: [a-z-]+ W=|node threads|^peers.sh: node:' "$out/run.log" | tail -n 80 >&2
echo "== done: failed=$failed ($SECONDS s)" >&2
exit "$failed"
