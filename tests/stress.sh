#!/usr/bin/env bash
# The multi-process tests (integration: failover, racks, checkpoints, moves; the Python
# package; the README's demo; TLS on the control plane; the failover, rack-bound and
# netns-racks bench smokes) run N times with a CPU hog on every core, to bring out the
# races an idle machine hides. Each failure's output is kept; the report lists every
# test that failed, how often, and where its output is. Exits 1 on any failure or
# timeout.
#
#   bash tests/stress.sh [--runs 20] [--build-dir DIR] [--label integration]
#                        [--tests REGEX] [--only REGEX] [--hog N] [--jobs 2]
#                        [--timeout 600] [--out DIR]
#
#   --runs N        how many times (default 20)
#   --build-dir DIR default ./build-asan if it has the integration tests (bash
#                   tests/sanitize.sh --build-only), else ./build (configured with
#                   RW_INTEGRATION_TESTS=ON, which is the default)
#   --label L       every test with this ctest label (default integration)
#   --tests REGEX   and every test whose name matches (default: python_package,
#                   demo_digits, tls_control_plane and the failover, rack_bound and
#                   netns_racks bench smokes)
#   --only REGEX    of those, only the ones whose name matches
#   --hog N         busy processes beside the tests (default: one per core)
#   --jobs J        tests at a time (default 2; resource locks are kept)
#   --out DIR       where the report and failures' output go (default
#                   BUILD/stress-DATE-TIME); report.txt and report.json
#
# Tests run as ctest would run them (working directory, environment, timeout, locks,
# pass and skip expressions; the sanitizer options tests/sanitize.sh sets, in a
# sanitized build), by tests/support/stress.py, without touching the build's Testing/.
set -euo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in -h|--help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
exec /usr/bin/python3 tests/support/stress.py "$@"
