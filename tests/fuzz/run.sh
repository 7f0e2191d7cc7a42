#!/usr/bin/env bash
# Runs RackWeave's libFuzzer targets (tests/fuzz/*.cpp) under AddressSanitizer and
# UndefinedBehaviorSanitizer, each for a bounded time, and prints each one's executions.
#
#   bash tests/fuzz/run.sh [--seconds N] [--build-dir DIR] [--no-build] [--record]
#                          [TARGET...]
#
#   --seconds N      how long each target runs (default 60)
#   --build-dir DIR  the clang build with RW_FUZZ=ON (default ./build-fuzz; configured
#                    and built here unless --no-build)
#   --no-build       use DIR as it is (ctest's short runs do this)
#   --record         write this run's rows into bench/RESULTS.md's fuzz table (rows of
#                    targets not run now are kept)
#   TARGET...        fuzz_frame_header, fuzz_hello, ... (default: every target)
#
# The corpus of each target lives in DIR/fuzz-corpus/TARGET: seeds built by rw-fuzz-seeds
# (messages as peers send them), the files in tests/fuzz/seeds/TARGET and config/*.toml
# for the config loader, plus whatever earlier runs found. A crash, leak, sanitizer report
# or a violated property (tests/fuzz/fuzz_check.hpp) leaves its input in
# DIR/fuzz-artifacts and makes the script exit 1. DIR/fuzz-summary.txt gets one line per
# target run: name, executions, seconds, result.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=60
build=build-fuzz
do_build=1
record=0
targets=()
while (($#)); do
  case $1 in
    --seconds) seconds=${2:?--seconds needs a number}; shift 2 ;;
    --build-dir) build=${2:?--build-dir needs a directory}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --record) record=1; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || { echo "run.sh: --seconds takes a whole number > 0" >&2; exit 2; }

all=(fuzz_frame_header fuzz_hello fuzz_welcome fuzz_challenge fuzz_proof fuzz_error
     fuzz_attach fuzz_located fuzz_reroute fuzz_hyper fuzz_fabric_offer fuzz_fabric_place fuzz_sparse
     fuzz_half fuzz_locator
     fuzz_node_config fuzz_tenants fuzz_shell_args fuzz_http_head)
((${#targets[@]})) || targets=("${all[@]}")

if ((do_build)); then
  bash apps/scripts/setup.sh --packages-only
  bash tests/configure_clang.sh "$build" address,undefined -DRW_FUZZ=ON -DRW_BUILD_TESTS=OFF
  cmake --build "$build" -j"${RW_JOBS:-2}" --target rw-fuzz-seeds "${targets[@]}"
fi

build=$(cd "$build" && pwd)
corpus=$build/fuzz-corpus
artifacts=$build/fuzz-artifacts
mkdir -p "$corpus" "$artifacts"
# Seeds, once per run; ctest runs several targets at once, hence the lock.
flock "$corpus/.lock" "$build/tests/fuzz/rw-fuzz-seeds" "$corpus"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=0
rows=()
for t in "${targets[@]}"; do
  bin=$build/tests/fuzz/$t
  [[ -x $bin ]] || { echo "run.sh: $bin is not built (a target of tests/fuzz?)" >&2; exit 2; }
  mkdir -p "$corpus/$t"
  [[ -d tests/fuzz/seeds/$t ]] && cp -n tests/fuzz/seeds/$t/* "$corpus/$t/" 2>/dev/null || true
  [[ $t == fuzz_node_config ]] && for f in config/*.toml; do cp -n "$f" "$corpus/$t/"; done
  log=$build/fuzz-$t.log
  rc=0
  # libFuzzer stops itself after --seconds; the KILL is only for a hung target.
  # (Run from the artifacts directory: an aborting target's libinfinipath, loaded with
  # libfabric, drops a backtrace file into the working directory.)
  (cd "$artifacts" && timeout -s KILL $((seconds + 120)) "$bin" -max_total_time="$seconds" \
    -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$artifacts/$t-" \
    "$corpus/$t") >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if ((rc == 0)); then
    result=ok
  else
    result="FAILED (exit $rc)"
    failed=1
    echo "---- $t: last lines of $log ----" >&2
    tail -40 "$log" >&2
    ls "$artifacts" | grep "^$t-" | sed "s|^|input: $artifacts/|" >&2 || true
  fi
  printf '%-20s %12s executions in %4s s: %s\n' "$t" "${execs:-?}" "$seconds" "$result" \
    | tee -a "$build/fuzz-summary.txt"
  rows+=("| $t | ${execs:-?} | $seconds | $(ls "$corpus/$t" | wc -l) | $result |")
done
if ((record)); then
  # The fuzz section's table: this run's rows replace those of the same targets, rows of
  # targets not run now stay (a target may be given a longer run of its own).
  rows_file=$(mktemp)
  printf '%s\n' "${rows[@]}" >"$rows_file"
  python3 - bench/RESULTS.md "$rows_file" "$(nproc)" "$(date -u +%Y-%m-%d)" <<'PY'
import re, subprocess, sys, tempfile
path, rows_file, cores, day = sys.argv[1:5]
new = [l.rstrip("\n") for l in open(rows_file) if l.startswith("| ")]
text = open(path).read()
m = re.search(r"<!-- fuzz:begin -->.*?<!-- fuzz:end -->", text, re.S)
old = [l for l in (m.group(0).splitlines() if m else []) if l.startswith("| fuzz_")]
rows = {l.split("|")[1].strip(): l for l in old}
rows.update({l.split("|")[1].strip(): l for l in new})
section = "\n".join([
    "<!-- fuzz:begin -->",
    "## Fuzzing (tests/fuzz/run.sh)",
    "",
    f"`bash tests/fuzz/run.sh --seconds N --record [TARGET...]` on {cores} cores, last on {day}:",
    "libFuzzer (clang-14) with AddressSanitizer, UndefinedBehaviorSanitizer and",
    "LeakSanitizer; a crash, leak, sanitizer report or violated property fails the run.",
    "Each row is its target's latest recorded run.",
    "",
    "| target | executions | seconds | corpus files | result |",
    "|---|---|---|---|---|",
    *[rows[k] for k in sorted(rows)],
    "<!-- fuzz:end -->",
])
with tempfile.NamedTemporaryFile("w", delete=False) as f:
    f.write(section + "\n")
subprocess.run([sys.executable, "bench/lib/update_results.py", path, "fuzz", f.name], check=True)
PY
  rm -f "$rows_file"
fi
exit $failed
