#!/usr/bin/env bash
# Every tracked C++ file is formatted as .clang-format says (clang-format-14, which
# apps/scripts/setup.sh installs), and no Catch2 test name holds a ';'. Prints "check_format: ok", or the files that are not
# and how to fix them.
#
#   bash tests/format/check_format.sh [SOURCE_DIR]
#
# To format the tree: git ls-files '*.cpp' '*.hpp' | xargs clang-format-14 -i
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
command -v clang-format-14 >/dev/null || {
  echo "check_format: clang-format-14 is not installed (bash apps/scripts/setup.sh)" >&2
  exit 1
}
mapfile -t files < <(git ls-files '*.cpp' '*.hpp')
((${#files[@]} > 50)) || {
  echo "check_format: only ${#files[@]} C++ files found in $(pwd): not a RackWeave tree?" >&2
  exit 1
}
# One clang-format for every file; it names each file that differs in its warnings.
rc=0
out=$(clang-format-14 --dry-run -Werror "${files[@]}" 2>&1) || rc=$?
mapfile -t bad < <(sed -n \
  's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<<"$out" \
  | sort -u)
if ((rc != 0 && ${#bad[@]} == 0)); then # it failed for another reason: say it
  printf '%s\n' "$out" | tail -20
  echo "check_format: clang-format-14 failed (exit $rc)"
  exit 1
fi
if ((${#bad[@]})); then
  printf 'check_format: not formatted: %s\n' "${bad[@]}"
  echo "check_format: ${#bad[@]} of ${#files[@]} files; fix with: clang-format-14 -i FILE..."
  exit 1
fi
# A Catch2 test's name may not hold ';': catch_discover_tests hands the names to CTest
# as a list, which splits one at it into two tests that match nothing (both fail).
# A name may be several string literals over several lines: they are joined first.
# (Into a variable first, so that a failing check fails the script under pipefail.)
semis_found=$(git ls-files 'tests/*.cpp' | python3 -c '
import re, sys
literal = r"\"(?:[^\"\\\n]|\\.)*\""
name = re.compile(r"TEST_CASE\(\s*((?:" + literal + r"\s*)+)")
for path in sys.stdin.read().split():
    src = open(path, encoding="utf-8").read()
    for m in name.finditer(src):
        text = "".join(s[1:-1] for s in re.findall(literal, m.group(1)))
        if ";" in text:
            print("%s:%d: %s" % (path, src.count("\n", 0, m.start()) + 1, text))
')
mapfile -t semis < <(printf '%s' "$semis_found" | sed '/^$/d')
if ((${#semis[@]})); then
  printf 'check_format: a test name with a semicolon (CTest splits it): %s\n' "${semis[@]}"
  exit 1
fi
echo "check_format: ok (${#files[@]} files)"
