#!/usr/bin/env bash
# The many-core check (issue 36), as run on the 16-core GPU machine through the device
# tool: one call, nothing of ours installed there, every figure written to OUT as it
# comes (a cut-off run still returns what it measured).
#
#   bash bench/many-core.sh --out DIR --new BUNDLE [--old BUNDLE] [--smoke]
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
#   headers    Python's and torch's pybind11 headers (to build the extension here)
# --smoke: W = 2 at 1MiB, 2 iterations, every stage (a few seconds each), to check the
# script on this machine before spending device time.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

out= new= old= smoke=0
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --old) old=$2; shift 2 ;;
    --smoke) smoke=1; shift ;;
    -h|--help) sed -n 2,22p "$0"; exit 0 ;;
    *) echo "many-core.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n $out && -n $new ]] || { echo "many-core.sh: --out and --new are needed" >&2; exit 2; }
[[ -f $new/BUNDLE ]] || { echo "many-core.sh: $new is not a bundle (bench/bundle.sh)" >&2; exit 2; }
mkdir -p "$out"

workers="2 4 8 14" sizes="4MiB 64MiB" iters=8 warmup=2
big_w="8 14" small_w="4 8" big=64MiB small=4MiB shards=4 results=()
if ((smoke)); then
  workers=2 sizes=1MiB iters=2 warmup=1 big_w=2 small_w=2 big=1MiB small=1MiB shards=1
  results=(--no-results)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
exec 2> >(tee -a "$out/run.log" >&2)
: >"$out/results.jsonl"
stage() { echo "== $* ($(date -u +%T), $SECONDS s in)" >&2; }
# keep STAGE: its JSON lines into results.jsonl, tagged; its log into run.log.
keep() {
  sed "s/^{/{\"stage\":\"$1\",/" "$work/$1.jsonl" >>"$out/results.jsonl"
  cat "$work/$1.log" >>"$out/run.log"
}
failed=0

stage facts
{
  echo "cores: $(nproc); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "NUMA domains: $(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)"
  echo "/dev/shm: $(df -h /dev/shm 2>/dev/null | tail -1); ulimit -n: $(ulimit -n)"
  echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "kernel: $(uname -sr); $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  echo "python: $(python3 --version 2>&1); torch: $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"
  echo "mpirun: $(mpirun --version 2>&1 | head -1)"
  echo "new: $(head -1 "$new/BUNDLE")"
  [[ -n $old ]] && echo "old: $(head -1 "$old/BUNDLE")"
} >&2

stage "scale: new build, every system"
timeout -k 10 $((smoke ? 120 : 200)) bash bench/scale.sh --build-dir "$new" --workers "$workers" \
  --bytes "$sizes" --iters "$iters" --warmup "$warmup" --timeout 60 --json ${results[@]+"${results[@]}"} \
  >"$work/scale.jsonl" 2>"$work/scale.log" || { failed=1; echo "scale failed" >&2; }
keep scale
((smoke)) || cp bench/RESULTS.md "$out/RESULTS.md"

if [[ -n $old ]]; then
  stage "old build: rackweave-tcp, rackweave-shm"
  timeout -k 10 $((smoke ? 60 : 80)) bash bench/peers.sh --build-dir "$old" --workers "$workers" \
    --bytes "$sizes" --iters "$iters" --warmup "$warmup" --timeout 60 --json --no-results \
    --systems "rackweave-tcp rackweave-shm" >"$work/old.jsonl" 2>"$work/old.log" ||
    { failed=1; echo "old failed" >&2; }
  keep old
fi

stage "pollers: new build, rackweave-tcp at $big"
: >"$work/pollers.jsonl"; : >"$work/pollers.log"
for p in 1 2 8; do
  timeout -k 10 40 bash bench/peers.sh --build-dir "$new" --workers "$big_w" \
    --bytes "$big" --iters "$iters" --warmup "$warmup" --timeout 30 --json --no-results \
    --systems rackweave-tcp --node-args "--pollers $p" 2>>"$work/pollers.log" |
    sed "s/^{/{\"pollers\":$p,/" >>"$work/pollers.jsonl" || failed=1
done
keep pollers

stage "shards: new build at $small with --shards $shards"
timeout -k 10 40 bash bench/peers.sh --build-dir "$new" --workers "$small_w" --bytes "$small" \
  --iters "$iters" --warmup "$warmup" --timeout 30 --json --no-results \
  --systems "rackweave-tcp rackweave-shm" --node-args "--shards $shards" \
  >"$work/shards.jsonl" 2>"$work/shards.log" || failed=1
keep shards

stage headers
torch_inc=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))' 2>/dev/null)
py_inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
if ((!smoke)) && [[ -d $torch_inc/pybind11 && -d $py_inc ]]; then
  tar czf "$out/py-headers.tgz" -C / "${py_inc#/}" "${torch_inc#/}/pybind11" 2>/dev/null &&
    echo "py-headers.tgz: $py_inc, $torch_inc/pybind11 ($(du -h "$out/py-headers.tgz" | cut -f1))" >&2
fi
grep -hE '^peers.sh: [a-z-]+ W=|node threads|^peers.sh: node:' "$out/run.log" | tail -n 80 >&2
stage "done: failed=$failed"
exit "$failed"
