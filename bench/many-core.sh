#!/usr/bin/env bash
# The many-core check (issue 36), as run on the 16-core GPU machine through the device
# tool: one call, nothing of ours installed there, every figure written to OUT as it
# comes (a cut-off run still returns what it measured).
#
#   bash bench/many-core.sh --out DIR --new BUNDLE [--old BUNDLE] [--smoke]
#   bash bench/many-core.sh --smoke --build-dir BUILD [--stages ...]   (the suite's smoke:
#                           BUILD packed into a temporary bundle, OUT a temporary folder)
#                           [--stages "facts scale old pollers shards repeat verify trace
#                                      sweep headers"]
#
# BUNDLE: a build packed by bench/bundle.sh (e.g. build-bundle/new, build-bundle/old,
# carried with the checkout). Stages, each bounded in time; OUT gets run.log (the facts
# and every stage's log), results.jsonl (every JSON line, with its "stage"),
# RESULTS.md (with scale.sh's section) and py-headers.tgz: four files, as the device
# tool returns at most eight.
#   facts      the machine: cores, NUMA, CPU, GPU, python, torch, MPI
#   scale      bench/scale.sh on NEW: W 2 4 8 14 x 4MiB 64MiB, every system
#   old        rackweave-tcp and -shm of OLD, same cells (no RESULTS.md)
#   pollers    rackweave-tcp of NEW at W 8 14 x 64MiB with --pollers 1 2 8
#   shards     rackweave-tcp and -shm of NEW at W 4 8 x 4MiB with --shards 4
#   repeat     twice more: rackweave-tcp, rackweave-shm, gloo and torch-gloo of NEW at
#              W 4 8 14 x 64MiB (with scale's, three runs of each target cell)
#   verify     rackweave-tcp and -shm of NEW at W 4 8 14 x 4MiB 64MiB with rw-bench
#              --verify: every result bitwise the rank-order sum (a row fails if not)
#   trace      bench/trace.sh on NEW: what --trace costs, 3 pairs at W 4 x 64MiB
#   sweep      rackweave-tcp of NEW at W 8 14 x 64MiB: the defaults, then one
#              change each (push window, chunk size, shards, pollers); not by default
#   headers    Python's and torch's pybind11 headers (to build the extension here)
# --stages: which to run (default: all but sweep), in the order above.
# --smoke: W = 2 at 1MiB, 2 iterations, every stage (a few seconds each), to check the
# script on this machine before spending device time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

out= new= old= smoke=0 build= stages=" facts scale old pollers shards verify trace headers "
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --stages) stages=" $2 "; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    -h|--help) sed -n 2,30p "$0"; exit 0 ;;
    *) echo "many-core.sh: unknown option $1" >&2; exit 2 ;;
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
stage() { echo "== $* ($(date -u +%T), $SECONDS s in)" >&2; }
# keep STAGE: its JSON lines into results.jsonl, tagged; its log into run.log.
keep() {
  sed "s/^{/{\"stage\":\"$1\",/" "$work/$1.jsonl" >>"$out/results.jsonl"
  cat "$work/$1.log" >>"$out/run.log"
}
failed=0
want() { [[ $stages == *" $1 "* ]]; }

want facts && stage facts
want facts && {
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
} >&2

if want scale; then
stage "scale: new build, every system"
timeout -k 10 $((smoke ? 120 : 200)) bash bench/scale.sh --build-dir "$new" --workers "$workers" \
  --bytes "$sizes" --iters "$iters" --warmup "$warmup" --timeout 60 --json ${results[@]+"${results[@]}"} \
  >"$work/scale.jsonl" 2>"$work/scale.log" || { failed=1; echo "scale failed" >&2; }
keep scale
fi

if [[ -n $old ]] && want old; then
  stage "old build: rackweave-tcp, rackweave-shm"
  timeout -k 10 $((smoke ? 60 : 80)) bash bench/peers.sh --build-dir "$old" --workers "$workers" \
    --bytes "$sizes" --iters "$iters" --warmup "$warmup" --timeout 60 --json --no-results \
    --systems "rackweave-tcp rackweave-shm" >"$work/old.jsonl" 2>"$work/old.log" ||
    { failed=1; echo "old failed" >&2; }
  keep old
fi

if want pollers; then
stage "pollers: new build, rackweave-tcp at $big"
: >"$work/pollers.jsonl"; : >"$work/pollers.log"
for p in 1 2 8; do
  started=$SECONDS
  timeout -k 10 40 bash bench/peers.sh --build-dir "$new" --workers "$big_w" \
    --bytes "$big" --iters "$iters" --warmup "$warmup" --timeout 30 --json --no-results \
    --systems rackweave-tcp --node-args "--pollers $p" 2>>"$work/pollers.log" |
    sed "s/^{/{\"pollers\":$p,/" >>"$work/pollers.jsonl"
  rc=${PIPESTATUS[0]}
  if ((rc != 0)); then # why, here: the folder goes away with the run
    failed=1
    echo "pollers $p: peers.sh exited $rc after $((SECONDS - started)) s (124: the" \
      "40 s limit); the end of its log:" >&2
    tail -n 15 "$work/pollers.log" >&2
  fi
done
keep pollers
fi

if want shards; then
stage "shards: new build at $small with --shards $shards"
timeout -k 10 40 bash bench/peers.sh --build-dir "$new" --workers "$small_w" --bytes "$small" \
  --iters "$iters" --warmup "$warmup" --timeout 30 --json --no-results \
  --systems "rackweave-tcp rackweave-shm" --node-args "--shards $shards" \
  >"$work/shards.jsonl" 2>"$work/shards.log" || failed=1
keep shards
fi

if want repeat; then
  stage "repeat: new build, the target cells twice more"
  : >"$work/repeat.jsonl"; : >"$work/repeat.log"
  for r in 2 3; do
    timeout -k 10 $((smoke ? 60 : 75)) bash bench/peers.sh --build-dir "$new" --workers "$target_w" \
      --bytes "$big" --iters "$iters" --warmup "$warmup" --timeout 30 --json --no-results \
      --systems "rackweave-tcp rackweave-shm gloo torch-gloo" 2>>"$work/repeat.log" |
      sed "s/^{/{\"run\":$r,/" >>"$work/repeat.jsonl" || failed=1
  done
  keep repeat
fi

if want verify; then
  stage "verify: new build, every target cell checked bitwise"
  timeout -k 10 $((smoke ? 60 : 150)) bash bench/peers.sh --build-dir "$new" --workers "$target_w" \
    --bytes "$sizes" --iters $((smoke ? 2 : 3)) --warmup 1 --timeout 60 --json --no-results \
    --systems "rackweave-tcp rackweave-shm" --bench-args "--verify" \
    >"$work/verify.jsonl" 2>"$work/verify.log" || { failed=1; echo "verify failed" >&2; }
  keep verify
fi

if want trace; then
  stage "trace: what --trace costs on the new build"
  # Its JSON-free report goes to the log; its RESULTS.md section into OUT's copy.
  timeout -k 10 $((smoke ? 60 : 120)) bash bench/trace.sh --build-dir "$new" \
    $( ((smoke)) && echo --smoke || echo --pairs 3) >"$work/trace.log" 2>&1 ||
    { failed=1; echo "trace failed" >&2; }
  : >"$work/trace.jsonl"
  keep trace
fi

if want sweep; then
  stage "sweep: new build, rackweave-tcp at $big, one change at a time"
  : >"$work/sweep.jsonl"; : >"$work/sweep.log"
  variants=("defaults|||" "window0||--push-window 0" "window2M||--push-window 2MiB"
            "window8M||--push-window 8MiB" "chunk256K||--chunk-bytes 256KiB"
            "chunk1M||--chunk-bytes 1MiB" "shards6|--shards 6|" "pollers6|--pollers 6|"
            "chunk256K-window4M||--chunk-bytes 256KiB --push-window 4MiB")
  for v in "${variants[@]}"; do
    IFS='|' read -r name nargs bargs _ <<<"$v"
    echo "-- $name: node [$nargs] bench [$bargs]" >>"$work/sweep.log"
    timeout -k 10 40 bash bench/peers.sh --build-dir "$new" --workers "$big_w" \
      --bytes "$big" --iters "$iters" --warmup "$warmup" --timeout 30 --json --no-results \
      --systems rackweave-tcp ${nargs:+--node-args "$nargs"} ${bargs:+--bench-args "$bargs"} \
      2>>"$work/sweep.log" | sed "s/^{/{\"variant\":\"$name\",/" >>"$work/sweep.jsonl" || failed=1
  done
  keep sweep
fi

# The sections the stages wrote (scale, trace), for bench/RESULTS.md here.
((smoke)) || cp bench/RESULTS.md "$out/RESULTS.md"

want headers && stage headers
torch_inc=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))' 2>/dev/null)
py_inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
if want headers && ((!smoke)) && [[ -d $torch_inc/pybind11 && -d $py_inc ]]; then
  tar czf "$out/py-headers.tgz" -C / "${py_inc#/}" "${torch_inc#/}/pybind11" 2>/dev/null &&
    echo "py-headers.tgz: $py_inc, $torch_inc/pybind11 ($(du -h "$out/py-headers.tgz" | cut -f1))" >&2
fi
grep -hE '^peers.sh: [a-z-]+ W=|node threads|^peers.sh: node:' "$out/run.log" | tail -n 80 >&2
stage "done: failed=$failed"
exit "$failed"
