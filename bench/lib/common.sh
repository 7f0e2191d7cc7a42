# shellcheck shell=bash
# Helpers shared by the benchmark scripts in bench/. Sourced, never run: it only defines
# functions. The scripts cd to the repository root after sourcing it; the functions that
# name files (snapshot_rackweave, update_results) expect that. Messages are prefixed with
# the calling script's name (netns.sh, sweep.sh, ...).
#
#   source "$(dirname "$0")/lib/common.sh"

# Smoke mode (--smoke, which every script takes): a short run on tiny sizes, so the
# test suite (tests/bench_smoke.cmake) runs every benchmark's whole path, its readers of
# every output included, without writing bench/RESULTS.md or plots. A script that
# cannot run here in smoke mode (no root, no peers built) says why and exits 77,
# which ctest counts as skipped.
smoke=0
smoke_skip=77

# take_smoke ARG...: sets smoke=1 if --smoke is among ARG..., and smoke_args=(the rest).
take_smoke() {
  smoke_args=()
  local a
  for a; do
    if [[ $a == --smoke ]]; then smoke=1; else smoke_args+=("$a"); fi
  done
}

# skip_smoke TEXT...: in smoke mode, says why the run is skipped and exits 77; else
# says TEXT as an error and exits 1.
skip_smoke() {
  if ((smoke)); then note "smoke: skipped: $*"; exit "$smoke_skip"; fi
  note "$@"; exit 1
}

# build_tree: builds RackWeave (apps/scripts/setup.sh), except in smoke mode, where the
# test suite has just built it and another build would race with the running tests.
build_tree() {
  ((smoke)) || bash apps/scripts/setup.sh >/dev/null
}

# say TEXT...: a report line, to fd 3 (stdout, or stderr under --json: see open_report).
say() { printf '%s\n' "$*" >&3; }

# note TEXT...: a progress or error line on stderr, prefixed with the script's name.
note() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }

# usage_error TEXT...: says what is wrong with the command line and exits with status 2.
usage_error() { note "$@"; exit 2; }

# open_report JSON: points say (fd 3) at stdout, or at stderr when JSON is 1 (stdout is for JSON).
open_report() {
  if (($1)); then exec 3>&2; else exec 3>&1; fi
}

# invocation_of ARG...: the command line "bash bench/SCRIPT ARG...", quoted where needed.
invocation_of() {
  local arg invocation="bash bench/${0##*/}"
  for arg in "$@"; do
    if [[ $arg =~ ^[A-Za-z0-9_./:=+-]+$ ]]; then invocation+=" $arg"
    else invocation+=" '${arg//\'/\'\\\'\'}'"; fi
  done
  printf '%s\n' "$invocation"
}

# run_option HELP_LINES ARG...: parses the run options (--iters/--warmup/--timeout/--json/-h); sets shifted.
# shellcheck disable=SC2034 # it sets the calling script's option variables
run_option() {
  local help=$1; shift
  case $1 in
    --iters) iters=$2; shifted=2 ;;
    --warmup) warmup=$2; shifted=2 ;;
    --timeout) run_timeout=$2; shifted=2 ;;
    --json) json=1; shifted=1 ;;
    --smoke) smoke=1; shifted=1 ;;
    -h|--help) sed -n "${help}p" "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
}

# check_run_counts ITERS WARMUP TIMEOUT: a usage error unless all are whole numbers (ITERS, TIMEOUT >= 1).
check_run_counts() {
  [[ $1 =~ ^[1-9][0-9]*$ && $2 =~ ^[0-9]+$ && $3 =~ ^[1-9][0-9]*$ ]] ||
    usage_error "--iters, --warmup and --timeout take whole numbers"
}

# to_bytes SIZE: 64MiB, 4M, 512KiB, 1048576 -> bytes; fails on anything else.
to_bytes() {
  local n u
  [[ $1 =~ ^([0-9]+)(B|K|KiB|M|MiB|G|GiB)?$ ]] || return 1
  n=${BASH_REMATCH[1]} u=${BASH_REMATCH[2]}
  case $u in
    ''|B) echo "$n" ;;
    K|KiB) echo $((n << 10)) ;;
    M|MiB) echo $((n << 20)) ;;
    G|GiB) echo $((n << 30)) ;;
  esac
}

# check_sizes SIZE...: a usage error unless each is a positive multiple of 4 bytes (float32 tensors).
check_sizes() {
  local s b
  for s; do
    b=$(to_bytes "$s") && ((b > 0 && b % 4 == 0)) ||
      usage_error "bad size $s (a positive multiple of 4 bytes, e.g. 64MiB)"
  done
}

# running PID: true while PID is alive and not a zombie.
running() {
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]
}

# stop_pids PID...: SIGTERM, 5 s grace, then SIGKILL to each one's group (timeout's); reaps them all.
stop_pids() {
  local p end=$((SECONDS + 5)) left
  for p; do kill -TERM "$p" 2>/dev/null || true; done
  while ((SECONDS < end)); do
    left=0
    for p; do
      if running "$p"; then left=1; fi
    done
    ((left)) || break
    sleep 0.1
  done
  for p; do
    if running "$p"; then kill -KILL -- "-$p" "$p" 2>/dev/null || true; fi
  done
  for p; do wait "$p" 2>/dev/null || true; done
}

# release PID...: an exit trap's common part: ignore further signals, stop PID..., remove $tmp.
release() {
  trap '' INT TERM HUP # a second Ctrl-C must not cut the cleanup short
  stop_pids "$@"
  if [[ -n ${tmp:-} ]]; then rm -rf "$tmp"; fi
}

# set_exit_traps FUNCTION: runs FUNCTION on exit, also after INT, TERM or HUP (exit 130, 143, 129).
set_exit_traps() {
  # shellcheck disable=SC2064 # the function's name, expanded now on purpose
  trap "$1" EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
}

# wait_for_port FILE PID: waits up to 10 s for rw-node PID to write its port FILE; fails if it doesn't.
wait_for_port() {
  for _ in {1..100}; do
    [[ -s $1 ]] && break
    running "$2" || break
    sleep 0.1
  done
  [[ -s $1 ]]
}

# snapshot_rackweave DIR SUBCMD: copies the RackWeave binaries to DIR once stable; DIR on LD_LIBRARY_PATH.
snapshot_rackweave() {
  # The tree may be rebuilt while a benchmark runs: measure one consistent copy, taken
  # once the files have been left alone for 5 s and run (rw-node --help and rw-bench
  # SUBCOMMAND --help), bounded by 5 minutes.
  local dir=$1 sub=$2 files=(build/apps/rw-node build/apps/rw-bench build/librackweave.so) newest
  mkdir -p "$dir"
  for _ in {1..60}; do
    if ls "${files[@]}" >/dev/null 2>&1; then
      newest=$(stat -c %Y "${files[@]}" | sort -n | tail -1)
      if (($(date +%s) - newest >= 5)); then
        cp "${files[@]}" "$dir/"
        if [[ $(stat -c %Y "${files[@]}" | sort -n | tail -1) == "$newest" ]] &&
          LD_LIBRARY_PATH=$dir timeout 20 "$dir/rw-node" --help >/dev/null 2>&1 &&
          LD_LIBRARY_PATH=$dir timeout 20 "$dir/rw-bench" "$sub" --help >/dev/null 2>&1
        then
          # The copies find their library by LD_LIBRARY_PATH (their RUNPATH points into ./build).
          export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
          return 0
        fi
      fi
    fi
    sleep 5
  done
  note "no usable RackWeave build in ./build after 5 minutes (missing or being rebuilt)"
  return 1
}

# cpu_model: the CPU's model name, for the machine line of a RESULTS.md section.
cpu_model() { grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'; }

# mem_gib: total memory to one decimal, "23.5 GiB".
mem_gib() { awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo; }

# mem_gib_floor: total memory in whole GiB as free -g gives it, "23 GiB" (comm.sh, kernel.sh).
mem_gib_floor() { free -g | awk '/Mem:/ {print $2 " GiB"}'; }

# load_avg: the 1, 5 and 15 minute load averages, "0.52 0.61 0.70".
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }

# machine_facts: "N cores (CPU), M GiB RAM, KERNEL", the start of a RESULTS.md machine line.
machine_facts() { echo "$(nproc) cores ($(cpu_model)), $(mem_gib) RAM, $(uname -sr)"; }

# update_results NAME FILE: replaces (or appends) the NAME section of bench/RESULTS.md with
# FILE. In smoke mode it updates a scratch copy instead, and checks the section is there.
update_results() {
  if ((smoke)); then
    local copy
    copy=$(mktemp)
    cp bench/RESULTS.md "$copy"
    python3 bench/lib/update_results.py "$copy" "$1" "$2" &&
      grep -q "<!-- $1:begin -->" "$copy" || { rm -f "$copy"; note "smoke: the $1 section was not written"; return 1; }
    rm -f "$copy"
    note "smoke: the $1 section is well formed; bench/RESULTS.md left alone"
    return 0
  fi
  python3 bench/lib/update_results.py bench/RESULTS.md "$1" "$2"
}
