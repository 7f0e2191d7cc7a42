# shellcheck shell=bash
# Helpers shared by the benchmark scripts in bench/. Sourced, never run: it only defines
# functions. The scripts cd to the repository root after sourcing it; the functions that
# name files (snapshot_rackweave, update_results) expect that. Messages are prefixed with
# the calling script's name (netns.sh, sweep.sh, ...).
#
#   source "$(dirname "$0")/lib/common.sh"

# Options every script takes, ahead of its own (common_options "$@"; set -- "${rest[@]}"):
#   --smoke          a short run on tiny sizes, a few seconds, that still goes through
#                    the whole path, every reader of every output included, and fails
#                    when a figure is missing or unreadable. It writes neither
#                    bench/RESULTS.md (update_results only checks the section) nor plots.
#                    tests/bench_smoke.cmake runs every script so. What cannot run here
#                    is skipped with a "smoke: skipped: WHY" line and status 0 (ctest
#                    counts the test as skipped), or, when only a part cannot, left out
#                    with a "smoke: partly skipped: WHAT: WHY" line.
#   --build-dir DIR  the RackWeave build to run, as built (default: build, which the
#                    script first brings up to date with apps/scripts/setup.sh).
smoke=0
build=build
build_given=0

# common_options ARG...: takes --smoke and --build-dir DIR out of ARG...; the rest go to
# the array rest. Sets smoke, build and build_given.
# shellcheck disable=SC2034 # it sets the calling script's variables
common_options() {
  rest=()
  while (($#)); do
    case $1 in
      --smoke) smoke=1; shift ;;
      --build-dir)
        (($# >= 2)) && [[ -n $2 ]] || usage_error "--build-dir takes a directory"
        [[ -d $2 ]] || usage_error "--build-dir $2 is not a directory"
        build=$(cd "$2" && pwd) build_given=1; shift 2 ;;
      *) rest+=("$1"); shift ;;
    esac
  done
}

# build_tree: brings ./build up to date (apps/scripts/setup.sh, quietly), unless
# --build-dir named a build to use as it is.
build_tree() {
  ((build_given)) || bash apps/scripts/setup.sh >/dev/null
}

# skip_smoke TEXT...: in smoke mode says "smoke: skipped: TEXT" and exits 0 (the whole
# run cannot be done here); otherwise TEXT is an error, exit 1.
skip_smoke() {
  if ((smoke)); then note "smoke: skipped: $*"; exit 0; fi
  note "$@"; exit 1
}

# check_numbers WHAT VALUE...: fails, saying WHAT was unreadable, unless every VALUE is
# a finite decimal number (1, -2.5, 3e-4).
check_numbers() {
  local what=$1 v; shift
  (($#)) || { note "$what: no value"; return 1; }
  for v; do
    [[ $v =~ ^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$ ]] || { note "$what: '$v' is not a number"; return 1; }
  done
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
# Returns 1, after naming it, when one of them died of a fault (SIGILL, SIGABRT, SIGBUS,
# SIGFPE, SIGSEGV: status 132, 134, 135, 136, 139), at its stop or before: a node that
# crashes as it exits fails the bench instead of passing unseen.
stop_pids() {
  local p end=$((SECONDS + 5)) left st crashed=0
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
  for p; do
    st=0
    wait "$p" 2>/dev/null || st=$?
    case $st in
      132|134|135|136|139)
        note "process $p ($(fault_name "$st")) died of a fault (exit status $st)"
        crashed=1 ;;
    esac
  done
  return "$crashed"
}

# fault_name STATUS: the signal's name for 128 + a fault's number.
fault_name() {
  case $1 in
    132) echo SIGILL ;; 134) echo SIGABRT ;; 135) echo SIGBUS ;; 136) echo SIGFPE ;;
    139) echo SIGSEGV ;; *) echo "status $1" ;;
  esac
}

# release PID...: an exit trap's common part: ignore further signals, stop PID... (one
# that died of a fault makes the script fail: exit_status 1), remove $tmp. Kept, and
# named, with RW_KEEP_TMP=1; kept too when the script fails (the exit status
# set_exit_traps saw is not 0), or when it set keep_logs_because (a figure worth a look:
# failover.sh --keep-above), without its files over 1 MiB (tensors, checkpoints): a
# failure seen once must leave the nodes' and workers' logs behind.
release() {
  trap '' INT TERM HUP # a second Ctrl-C must not cut the cleanup short
  local crashed=0
  stop_pids "$@" || crashed=1
  if ((crashed)) && [[ ${exit_status:-0} == 0 ]]; then
    exit_status=1 # the logs below are kept, and the script exits 1
  fi
  if [[ -n ${tmp:-} && -n ${RW_KEEP_TMP:-} ]]; then
    note "kept $tmp (RW_KEEP_TMP)"
  elif [[ -n ${tmp:-} && ${exit_status:-0} != 0 && ${exit_status:-0} != 130 ]]; then
    find "$tmp" -type f -size +1M -delete 2>/dev/null || true
    note "failed (exit $exit_status): its logs are kept in $tmp (files over 1 MiB removed)"
  elif [[ -n ${tmp:-} && -n ${keep_logs_because:-} ]]; then
    find "$tmp" -type f -size +1M -delete 2>/dev/null || true
    note "$keep_logs_because: its logs are kept in $tmp (files over 1 MiB removed)"
  elif [[ -n ${tmp:-} ]]; then
    rm -rf "$tmp"
  fi
}

# set_exit_traps FUNCTION: runs FUNCTION on exit, also after INT, TERM or HUP (exit 130,
# 143, 129), with the exit status in exit_status (release keeps $tmp's logs if not 0,
# and sets it to 1 when a process it stopped had died of a fault).
exit_status=0
set_exit_traps() {
  # shellcheck disable=SC2064 # the function's name, expanded now on purpose
  # The exit status is exit_status's, which FUNCTION may raise (release: a crashed node).
  trap "exit_status=\$?; $1; exit \$exit_status" EXIT
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

# snapshot_rackweave DIR SUBCMD: copies the RackWeave binaries ($build) to DIR once
# stable; DIR on LD_LIBRARY_PATH.
snapshot_rackweave() {
  # The tree may be rebuilt while a benchmark runs: measure one consistent copy, taken
  # once the files have been left alone for 5 s and run (rw-node --help and rw-bench
  # SUBCOMMAND --help), bounded by 5 minutes.
  local dir=$1 sub=$2 files=("$build/apps/rw-node" "$build/apps/rw-bench" "$build/librackweave.so") newest
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
  note "no usable RackWeave build in $build after 5 minutes (missing or being rebuilt)"
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
# The machine's cores, not OMP_NUM_THREADS (which GNU nproc reports when it is set: a
# bench that set it to 1 for its ranks once recorded a 2-core machine as 1 core).
machine_facts() {
  echo "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores ($(cpu_model)), $(mem_gib) RAM, $(uname -sr)"
}

# update_results NAME FILE: replaces (or appends) the NAME section of bench/RESULTS.md with
# FILE. In smoke mode it does so on a scratch copy instead, and fails unless the copy
# then holds FILE's text as its NAME section, with no FAIL in it.
update_results() {
  if ((smoke)); then
    local copy rc=0
    copy=$(mktemp)
    cp bench/RESULTS.md "$copy" &&
      python3 bench/lib/update_results.py "$copy" "$1" "$2" &&
      python3 - "$copy" "$1" "$2" <<'PY' || rc=1
import re, sys
path, name, section_file = sys.argv[1:]
want = open(section_file).read().rstrip("\n")
found = re.findall(r"<!-- %s:begin -->.*?<!-- %s:end -->" % (name, name), open(path).read(), re.S)
if found != [want]:
    sys.exit(f"the {name} section is not the one given ({len(found)} found)")
if "FAIL" in want:
    sys.exit(f"the {name} section reports a failure")
PY
    rm -f "$copy"
    if ((rc)); then note "smoke: the $1 section of bench/RESULTS.md would be wrong"; return 1; fi
    note "smoke: the $1 section is well formed; bench/RESULTS.md left alone"
    return 0
  fi
  python3 bench/lib/update_results.py bench/RESULTS.md "$1" "$2"
}
