#!/usr/bin/env bash
# Soak: one rack-agg (embedded coordinator) serves job after job for M minutes, the way
# a shared node lives: jobs created, stopped and deleted through the coordinator
# (rw-shell), workers joining, finishing, dying and rejoining, dying for good, and
# garbage sent to the worker port between them. Cycle kinds, in turn:
#   clean     two workers train an Adam job to the end, verified bitwise
#   rejoin    one worker dies mid-job (exit 9) and comes back as the same rank: verified
#   abandon   one worker dies for good: the other is told its peer did not join again
#             and the job fails (injected)
#   stop      the shell stops the job mid-training (injected)
# and every cycle ends with the job deleted and a connection that sends garbage bytes.
# The node's RSS, open fds and threads are sampled every 2 s (for the plot) and between
# cycles, with no job live (for the verdict). Targets: flat (the mean of the last 10 %
# of between-cycle samples within 5 % of the first 10 %'s, for RSS, fds and threads),
# every clean and rejoin job verified, and no warning or error in the node's log that
# is not one of the injected failures'.
# Prints a summary and writes bench/RESULTS.md (the soak section), bench/soak.png and
# its samples, bench/soak-samples.txt.
#
#   bash bench/soak.sh [--minutes 30] [--smoke] [--build-dir DIR]
#
# --smoke (see lib/common.sh): --minutes 1, neither RESULTS.md nor the plot written.
set -euo pipefail
# shellcheck source=lib/common.sh
source "$(dirname "$0")/lib/common.sh"
cd "$(dirname "$0")/.."
all_args=("$@")
common_options "$@"
set -- ${rest[@]+"${rest[@]}"}

minutes=30
((smoke)) && minutes=1
while (($#)); do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    -h|--help) sed -n 2,22p "$0"; exit 0 ;;
    *) usage_error "unknown option $1" ;;
  esac
done
[[ $minutes =~ ^[1-9][0-9]*$ ]] || usage_error "--minutes must be a positive integer, not '$minutes'"

# The plot needs Debian's matplotlib (the python3 first in PATH may not have it): known
# before a long run, not after it.
plot_python=/usr/bin/python3
if ((!smoke)) && ! "$plot_python" -c 'import matplotlib' 2>/dev/null; then
  usage_error "$plot_python has no matplotlib (apt-get install python3-matplotlib)"
fi

build_tree
tmp=$(mktemp -d)
node_pid= sampler_pid=
workers=()
cleanup() { release ${node_pid:+"$node_pid"} ${sampler_pid:+"$sampler_pid"} ${workers[@]+"${workers[@]}"}; }
set_exit_traps cleanup

# Finished jobs' chunks released after 500 ms (default 60 s: kept for a checkpoint), a
# worker gone without bye may take 1 s to come back.
"$build/apps/rw-node" --listen 127.0.0.1:0 --port-file "$tmp/port" --log-level info \
  --keep-finished-ms 500 --rejoin-timeout-ms 1000 2>"$tmp/node.log" &
node_pid=$!
wait_for_port "$tmp/port" "$node_pid" || { note "node did not start"; cat "$tmp/node.log" >&2; exit 1; }
address=$(<"$tmp/port")
port=${address##*:}

sample() { # t rss_kib fds threads
  printf '%s %s %s %s\n' "$1" "$(awk '/^VmRSS/ {print $2}' "/proc/$node_pid/status")" \
    "$(find "/proc/$node_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)" \
    "$(awk '/^Threads/ {print $2}' "/proc/$node_pid/status")"
}
start_s=$(date +%s.%N)
elapsed() { awk -v s="$start_s" -v n="$(date +%s.%N)" 'BEGIN {printf "%.1f", n - s}'; }
( while kill -0 "$node_pid" 2>/dev/null; do sample "$(elapsed)" >>"$tmp/samples.txt"; sleep 2; done ) &
sampler_pid=$!

shell() { timeout -k 5 60 "$build/apps/rw-shell" --connect "$address" -c "$1"; }
create() { # NAME -> token
  shell "local j = rw.job_create{name = '$1', workers = 2, optimizer = 'adam', lr = 0.05, momentum = 0.9, weight_decay = 0, chunk_bytes = '4KiB'}; print(j.token)"
}
worker() { # NAME TOKEN RANK LOG [ARG...]: starts one, its PID in $REPLY
  local name=$1 token=$2 rank=$3 log=$4; shift 4
  timeout -k 5 120 "$build/tests/rw-test-worker" --connect "$address" --job "$name" \
    --rank "$rank" --workers 2 --optimizer adam --token "$token" --out "$tmp/out-$rank.bin" \
    --verify "$@" >"$log" 2>&1 &
  REPLY=$!
  workers+=("$REPLY")
}
# finish PID: waits for a worker (a child of this shell: not in a subshell); its status
# in $REPLY.
finish() { REPLY=0; wait "$1" || REPLY=$?; }
both_ok() { finish "$1"; local a=$REPLY; finish "$2"; ((a == 0 && REPLY == 0)); }
garbage() { # a client that is no RackWeave peer: 64 bytes of noise, then gone
  { exec 5<>"/dev/tcp/127.0.0.1/$port" && head -c 64 /dev/urandom >&5 && exec 5>&-; } 2>/dev/null || true
}
fail() { note "cycle $cycle ($kind): $*"; tail -20 "$tmp/node.log" >&2; exit 1; }
verified() { grep -q "verified, bitwise the reference" "$1"; }

kinds=(clean rejoin abandon stop)
declare -A done_kind=([clean]=0 [rejoin]=0 [abandon]=0 [stop]=0)
deadline=$(( $(date +%s) + minutes * 60 ))
cycle=0
: >"$tmp/between.txt"
while (( $(date +%s) < deadline )); do
  kind=${kinds[cycle % 4]}
  name=soak-$cycle
  token=$(create "$name") || fail "job_create refused"
  case $kind in
    clean)
      worker "$name" "$token" 0 "$tmp/w0.log" --steps 20; w0=$REPLY
      worker "$name" "$token" 1 "$tmp/w1.log" --steps 20; w1=$REPLY
      both_ok "$w0" "$w1" || fail "a worker failed: $(cat "$tmp/w0.log" "$tmp/w1.log")"
      verified "$tmp/w0.log" && verified "$tmp/w1.log" || fail "not verified" ;;
    rejoin)
      worker "$name" "$token" 0 "$tmp/w0.log" --steps 20; w0=$REPLY
      worker "$name" "$token" 1 "$tmp/w1.log" --steps 20 --crash-at 7; w1=$REPLY
      finish "$w1"; ((REPLY == 9)) || fail "the crashing worker did not crash: $(cat "$tmp/w1.log")"
      worker "$name" "$token" 1 "$tmp/w1.log" --steps 20; w1=$REPLY
      both_ok "$w0" "$w1" || fail "a worker failed: $(cat "$tmp/w0.log" "$tmp/w1.log")"
      verified "$tmp/w0.log" && verified "$tmp/w1.log" || fail "not verified" ;;
    abandon)
      worker "$name" "$token" 0 "$tmp/w0.log" --steps 20; w0=$REPLY
      worker "$name" "$token" 1 "$tmp/w1.log" --steps 20 --crash-at 5; w1=$REPLY
      finish "$w1"; ((REPLY == 9)) || fail "the crashing worker did not crash"
      finish "$w0"; ((REPLY != 0)) || fail "the abandoned worker finished"
      grep -q "did not join again" "$tmp/w0.log" || fail "the abandoned worker was not told why: $(cat "$tmp/w0.log")" ;;
    stop)
      worker "$name" "$token" 0 "$tmp/w0.log" --steps 200 --step-delay-ms 20; w0=$REPLY
      worker "$name" "$token" 1 "$tmp/w1.log" --steps 200 --step-delay-ms 20; w1=$REPLY
      shell "rw.wait('$name', 3, {timeout = 30}); rw.job_stop('$name')" >/dev/null || fail "job_stop failed"
      finish "$w0"; local_a=$REPLY; finish "$w1"
      ((local_a != 0 && REPLY != 0)) || fail "a worker of a stopped job finished" ;;
  esac
  workers=()
  garbage
  shell "rw.wait('$name', 'ended', {timeout = 30}); rw.job_delete('$name')" >/dev/null \
    || fail "the job did not end or could not be deleted"
  done_kind[$kind]=$((done_kind[$kind] + 1))
  cycle=$((cycle + 1))
  sleep 1.2 # the finished job's chunks released (500 ms), the pollers' idle check (1 s)
  sample "$(elapsed)" >>"$tmp/between.txt"
done
kill "$sampler_pid" 2>/dev/null; wait "$sampler_pid" 2>/dev/null || true; sampler_pid=

# Warnings and errors that are not an injected failure's.
injected='not a RackWeave peer|worker away: .* disconnected without saying bye|connection closed: peer=[0-9.:]+ job=([^ ]+ id=)?[0-9]+ rank=[0-9]+: peer closed the connection|job (stopped|ended on this node: state=stopped): .*: stopped by an operator|did not join again within' 
# (From the first job on: the start's warnings about this machine and setup are not the
# soak's.)
sed -n '/job granted/,$p' "$tmp/node.log" | grep -E '\[(warning|error|critical)\]' \
  >"$tmp/warnings.txt" || true
grep -Ev "$injected" "$tmp/warnings.txt" >"$tmp/unexpected.txt" || true
# A step that waited past --slow-step-ms for a rank that was killed (rejoin, abandon) is
# the injected death's too: the node names the rank it waits for (docs/operations.md,
# "Stragglers"). Only when every rank it names went away in that job.
python3 - "$tmp/unexpected.txt" "$tmp/node.log" <<'PY'
import re, sys
lines, log = open(sys.argv[1]).read().splitlines(), open(sys.argv[2]).read()
away = set(re.findall(r"worker away: job='([^']*)' id=\d+ rank=(\d+)", log))
keep = []
for l in lines:
    m = re.search(r"job '([^']*)' \(id \d+\): step \d+ has waited \d+ ms on shard \d+ for (.*); "
                  r"the step timeout", l)
    ranks = re.findall(r"rank (\d+) \(", m.group(2)) if m else []
    if not (ranks and all((m.group(1), r) in away for r in ranks)):
        keep.append(l)
open(sys.argv[1], "w").write("".join(k + "\n" for k in keep))
PY

read -r verdict rss_first rss_last fds_first fds_last thr_first thr_last < <(python3 - "$tmp/between.txt" <<'PY'
import sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
if len(rows) < 2:
    print("FAIL 0 0 0 0 0 0"); sys.exit()
k = max(1, len(rows) // 10)
def mean(col, part): return sum(r[col] for r in part) / len(part)
out, ok = [], True
for col in (1, 2, 3):
    a, b = mean(col, rows[:k]), mean(col, rows[-k:])
    ok = ok and b <= a * 1.05
    out += [a, b]
print("ok" if ok else "FAIL", " ".join(f"{v:.1f}" for v in out))
PY
)
unexpected=$(wc -l <"$tmp/unexpected.txt")
((unexpected == 0)) || verdict=FAIL
total=$cycle
open_report 0
say "soak: $minutes min, $total cycles (clean ${done_kind[clean]}, rejoin ${done_kind[rejoin]}, abandon ${done_kind[abandon]}, stop ${done_kind[stop]}); every clean and rejoin job verified"
say "  RSS (MiB) between cycles, first 10 % -> last 10 %: $(awk -v a="$rss_first" -v b="$rss_last" 'BEGIN {printf "%.1f -> %.1f", a / 1024, b / 1024}')"
say "  open fds: $fds_first -> $fds_last; threads: $thr_first -> $thr_last"
say "  warnings and errors in the node's log: $(wc -l <"$tmp/warnings.txt"), not injected: $unexpected"
((unexpected == 0)) || { note "not injected:"; head -20 "$tmp/unexpected.txt" >&2; }
say "  verdict (flat within 5 %, nothing unexpected): $verdict"
check_numbers "soak figures" "$rss_first" "$rss_last" "$fds_first" "$fds_last" "$thr_first" "$thr_last"

if ((!smoke)); then
  # The samples stay beside the plot (seconds, RSS KiB, fds, threads; "between" marks
  # the between-cycle samples the verdict is taken on).
  { echo "# t_s rss_kib fds threads kind"; awk '{print $0, "every2s"}' "$tmp/samples.txt"
    awk '{print $0, "between"}' "$tmp/between.txt"; } >bench/soak-samples.txt
  "$plot_python" - "$tmp/samples.txt" "$tmp/between.txt" bench/soak.png "$minutes" <<'PY'
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
def load(p): return [list(map(float, l.split())) for l in open(p) if l.strip()]
every, between, out, minutes = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3], sys.argv[4]
fig, ax = plt.subplots(figsize=(8, 4))
ax.plot([r[0] / 60 for r in every], [r[1] / 1024 for r in every], lw=0.8, label="every 2 s")
ax.plot([r[0] / 60 for r in between], [r[1] / 1024 for r in between], "o", ms=2,
        label="between cycles (no job live)")
ax.set_xlabel("minutes"); ax.set_ylabel("node RSS (MiB)")
ax.set_ylim(bottom=0)
ax.set_title(f"rw-node RSS over a {minutes}-minute soak (bench/soak.sh)")
ax.legend(); fig.tight_layout(); fig.savefig(out, dpi=100)
PY
fi
section=$tmp/section.md
{
  echo "<!-- soak:begin -->"
  echo "## Soak (bench/soak.sh)"
  echo
  echo "\`$(invocation_of ${all_args[@]+"${all_args[@]}"})\` on $(machine_facts)."
  echo "One rack-agg with its embedded coordinator; $total cycles of a 2-worker Adam job"
  echo "(clean ${done_kind[clean]}, a worker dying and rejoining ${done_kind[rejoin]}, a worker dying for good"
  echo "${done_kind[abandon]}, stopped by the shell ${done_kind[stop]}), each deleted after, with garbage sent to"
  echo "the worker port every cycle. Between-cycle samples (no job live), first 10 % -> last 10 %:"
  echo
  echo "| | first 10 % | last 10 % |"
  echo "|---|---|---|"
  echo "| RSS (MiB) | $(awk -v v="$rss_first" 'BEGIN {printf "%.1f", v / 1024}') | $(awk -v v="$rss_last" 'BEGIN {printf "%.1f", v / 1024}') |"
  echo "| open fds | $fds_first | $fds_last |"
  echo "| threads | $thr_first | $thr_last |"
  echo
  echo "Warnings and errors in the node's log: $(wc -l <"$tmp/warnings.txt"), all from injected failures:"
  echo "$unexpected not injected. Verdict (flat within 5 %, every verified job verified,"
  echo "nothing unexpected): $verdict. RSS against time (samples: bench/soak-samples.txt):"
  echo
  echo "![soak](soak.png)"
  echo "<!-- soak:end -->"
} >"$section"
update_results soak "$section"
[[ $verdict == ok ]]
