#!/usr/bin/env bash
# The shard's fused sum+update kernel against a plain streaming kernel of the same
# access pattern, per instruction set and optimizer (rw-kernel-bench), written to the
# kernel section of bench/RESULTS.md. Target: ratio >= 0.9 on the kernels the node uses.
#
#   bash bench/kernel.sh [--bytes 64MiB] [--reps 15]
set -euo pipefail
cd "$(dirname "$0")/.."
args=("$@")
bash apps/scripts/setup.sh >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build/bench/rw-kernel-bench "${args[@]}" | tee "$tmp/table.txt"
build/bench/rw-kernel-bench "${args[@]}" --json >"$tmp/rows.jsonl"
best=$(build/bench/rw-kernel-bench --help >/dev/null && python3 - "$tmp/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
best = rows[-1]["isa"]  # the last instruction set listed is the one the node picks
mine = [r for r in rows if r["isa"] == best]
low = min(r["ratio"] for r in mine)
print(f"{best} {low:.3f} {'met' if low >= 0.9 else 'NOT met'}")
PY
)
read -r isa low verdict <<<"$best"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
{
  echo "<!-- kernel:begin -->"
  echo "## Shard kernel vs memory bandwidth (rw-kernel-bench)"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores ($cpu), $(free -g | awk '/Mem:/ {print $2}') GiB."
  echo "Fused sum of the last gradient + optimizer step, chunk by chunk, against a kernel"
  echo "that reads and writes exactly the same arrays with plain adds, same binary, same"
  echo "run, interleaved repetitions (median). ratio = stream time / step time."
  echo
  echo "Command: \`bash bench/kernel.sh ${args[*]}\` (runs \`rw-kernel-bench ${args[*]}\`)."
  echo
  echo '```'
  cat "$tmp/table.txt"
  echo '```'
  echo
  echo "The node uses **$isa** on this CPU: lowest ratio $low, target >= 0.9 **$verdict**."
  echo "<!-- kernel:end -->"
} >"$tmp/section.md"
python3 bench/lib/update_results.py bench/RESULTS.md kernel "$tmp/section.md"
echo "written: bench/RESULTS.md"
