#!/usr/bin/env bash
# Runs config/slurm/rackweave.sbatch outside Slurm: `srun` and `scontrol` shims run every
# step on this host, for an allocation of three "nodes" (all 127.0.0.1). It must start
# the coordinator and three rack-aggs, train over all three racks with verified results,
# and leave no process behind.
#   bash tests/integration/slurm_example.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: slurm_example.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d /tmp/rw-slurm.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
cat >"$tmp/bin/scontrol" <<'SHIM'
#!/usr/bin/env bash
[[ ${1:-} == show && ${2:-} == hostnames ]] || { echo "scontrol shim: not $*" >&2; exit 2; }
tr ',' '\n' <<<"$3"
SHIM
cat >"$tmp/bin/srun" <<'SHIM'
#!/usr/bin/env bash
# Drops srun's options and runs the step here.
while (($#)); do
  case $1 in
    -w|--nodelist|-N|-n) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
exec "$@"
SHIM
chmod +x "$tmp/bin/scontrol" "$tmp/bin/srun"

port=$((20000 + RANDOM % 20000))
set +e
PATH="$tmp/bin:$PATH" SLURM_JOB_NODELIST=127.0.0.1,127.0.0.1,127.0.0.1 SLURM_JOB_ID=test \
  RW_BIN_DIR="$build/apps" RW_PORT=$port RW_RUN_DIR="$tmp/run" RW_BYTES=1MiB RW_ITERS=3 \
  RW_WORKERS_PER_NODE=1 timeout -k 5 240 bash "$src/config/slurm/rackweave.sbatch" \
  >"$tmp/out" 2>&1 </dev/null
rc=$?
set -e
cat "$tmp/out"
fail() {
  echo "slurm_example: $*" >&2
  for f in "$tmp"/run/*.log; do echo "--- $f"; tail -20 "$f"; done >&2
  exit 1
}
((rc == 0)) || fail "the batch script exited $rc"
grep -q "^coordinator at 127.0.0.1:$port" "$tmp/out" || fail "no coordinator line"
for i in 0 1 2; do
  grep -q "^rack-agg $i at 127.0.0.1:$((port + 2 + i))" "$tmp/out" || fail "no rack-agg $i"
done
grep -q "job on 3 node(s)" "$tmp/out" || fail "the job did not span the three racks"
grep -q "verified: yes" "$tmp/out" || fail "the results were not verified exact"
# Every node stopped with the script.
if pgrep -f -- "--port-file $tmp/run/" >/dev/null; then
  pkill -KILL -f -- "--port-file $tmp/run/" || true
  fail "a node outlived the batch script"
fi
echo "slurm_example: ok"
