#!/usr/bin/env python3
"""The multi-process tests, run again and again under a CPU hog (tests/stress.sh).

Intermittent failures hide on an idle machine: a race needs one thread preempted at the
wrong moment. This runs the chosen tests of a build --runs times, with --hog busy
processes on the machine's cores, and reports each test's failures with their output
kept. It reads the tests from ctest (`ctest --show-only=json-v1`) and runs each test's
command itself, as ctest would (its working directory, environment, timeout, resource
locks, pass and skip expressions), so it writes nothing into the build's Testing/ and
can run beside, or inside, a ctest of the same build.

Exit status: 0 when every run of every test passed (or skipped), 1 when any failed or
timed out, 2 for bad usage or a build without the tests asked for.
"""

import argparse
import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

DEFAULT_TESTS = (r"^(python_package|demo_digits|tls_control_plane"
                 r"|bench_smoke_(failover|rack_bound|netns_racks))$")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tests/stress.sh",
        description="Run the multi-process tests N times under a CPU hog; report each "
        "test's failures, their output kept. Exits 1 on any failure.")
    p.add_argument("--runs", type=int, default=20, help="how many times (default 20)")
    p.add_argument("--build-dir", default=None,
                   help="the build whose tests run (default: ./build-asan if it has "
                   "the integration tests, else ./build)")
    p.add_argument("--label", default="integration",
                   help="every test with this ctest label (default integration; '' none)")
    p.add_argument("--tests", default=DEFAULT_TESTS,
                   help="and every test whose name matches this regular expression "
                   "(default: the Python package, the demo, the TLS test, the "
                   "failover, rack-bound and netns-racks bench smokes)")
    p.add_argument("--only", default=None,
                   help="of those, only the tests whose name matches (a regular expression)")
    p.add_argument("--hog", type=int, default=os.cpu_count() or 2,
                   help="busy processes beside the tests (default: one per core, %(default)s)")
    p.add_argument("--jobs", type=int, default=2,
                   help="tests at a time (default 2); tests sharing a resource lock never "
                   "run together")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds a test may run when ctest gives it no TIMEOUT (default 600)")
    p.add_argument("--out", default=None,
                   help="where failures' output and the report go (default "
                   "BUILD/stress-YYYYmmdd-HHMMSS)")
    a = p.parse_args(argv)
    if a.runs < 1 or a.runs > 1000:
        p.error("--runs takes 1 to 1000")
    if a.hog < 0 or a.hog > 256:
        p.error("--hog takes 0 to 256")
    if a.jobs < 1 or a.jobs > 64:
        p.error("--jobs takes 1 to 64")
    if a.timeout <= 0:
        p.error("--timeout takes seconds > 0")
    return a


def pick_build(given):
    if given:
        return os.path.abspath(given)
    for d in ("build-asan", "build"):
        if os.path.exists(os.path.join(d, "tests", "rw-integration-tests")):
            return os.path.abspath(d)
    return os.path.abspath("build")


class Test:
    def __init__(self, t):
        self.name = t["name"]
        self.command = t.get("command") or []
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        self.cwd = props.get("WORKING_DIRECTORY")
        self.env = dict(e.split("=", 1) for e in props.get("ENVIRONMENT", []) if "=" in e)
        self.timeout = float(props.get("TIMEOUT", 0)) or None
        self.labels = props.get("LABELS", [])
        self.locks = sorted(props.get("RESOURCE_LOCK", []))
        self.skip = [re.compile(x) for x in props.get("SKIP_REGULAR_EXPRESSION", [])]
        self.passing = [re.compile(x) for x in props.get("PASS_REGULAR_EXPRESSION", [])]
        self.failing = [re.compile(x) for x in props.get("FAIL_REGULAR_EXPRESSION", [])]
        self.will_fail = bool(props.get("WILL_FAIL", False))
        self.disabled = bool(props.get("DISABLED", False))


def list_tests(build):
    try:
        out = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"],
                             check=True, capture_output=True, text=True, timeout=120)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
        sys.exit(f"stress: cannot list the tests of {build}: {e}")
    return [Test(t) for t in json.loads(out.stdout).get("tests", [])]


def sanitized(build):
    """Whether `build` was configured with ASan (RW_SANITIZE, tests/configure_clang.sh)."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            return re.search(r"^RW_SANITIZE:STRING=.*address", f.read(), re.M) is not None
    except OSError:
        return False


def slug(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:120]


class Hog:
    """--hog busy processes, each in a session of its own, stopped by PID."""

    def __init__(self, n):
        self.procs = []
        for _ in range(n):
            self.procs.append(subprocess.Popen(
                [sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                start_new_session=True))

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []


class Running:
    """The tests' processes now running, so that a stop ends them at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.procs = set()
        self.stopping = threading.Event()

    def stop(self):
        self.stopping.set()
        with self.lock:
            for p in self.procs:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def run_one(test, env, default_timeout, log_path, locks, running):
    """Runs `test` once; returns (outcome, seconds, why), outcome passed, skipped,
    failed, timeout or stopped (not run to its end). Its output goes to log_path."""
    for name in test.locks:
        locks[name].acquire()
    try:
        if running.stopping.is_set():
            return "stopped", 0.0, "stopped before it ran"
        limit = test.timeout or default_timeout
        e = dict(env)
        e.update(test.env)
        t0 = time.monotonic()
        with open(log_path, "wb") as log:
            log.write(("$ " + " ".join(test.command) + "\n").encode())
            log.flush()
            try:
                p = subprocess.Popen(test.command, cwd=test.cwd, env=e,
                                     stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as err:
                return "failed", 0.0, f"could not start: {err}"
            with running.lock:
                running.procs.add(p)
            try:
                rc = p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
                return "timeout", time.monotonic() - t0, f"timed out after {limit:.0f} s"
            finally:
                with running.lock:
                    running.procs.discard(p)
                # Whatever the test left behind in its process group goes with it.
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        seconds = time.monotonic() - t0
        if running.stopping.is_set():
            return "stopped", seconds, "stopped while it ran"
        with open(log_path, "rb") as log:
            text = log.read().decode(errors="replace")
        if any(r.search(text) for r in test.skip):
            return "skipped", seconds, ""
        ok = rc == 0
        if test.passing:
            ok = any(r.search(text) for r in test.passing)
        failing = any(r.search(text) for r in test.failing)
        if failing:
            ok = False
        if test.will_fail:
            ok = not ok
        if ok:
            return "passed", seconds, ""
        return "failed", seconds, ("its output has the fail expression" if failing
                                   else f"exit status {rc}" if rc != 0
                                   else "its output lacks the pass expression")
    finally:
        for name in reversed(test.locks):
            locks[name].release()


def main(argv):
    a = parse_args(argv)
    build = pick_build(a.build_dir)
    if not os.path.isdir(build):
        print(f"stress: no build in {build} (bash apps/scripts/setup.sh, or --build-dir)",
              file=sys.stderr)
        return 2
    tests = list_tests(build)
    named = re.compile(a.tests) if a.tests else None
    only = re.compile(a.only) if a.only else None
    chosen = [t for t in tests if not t.disabled
              and ((a.label and a.label in t.labels) or (named and named.search(t.name)))
              and (only is None or only.search(t.name))]
    if not chosen:
        print(f"stress: {build} has no test with label '{a.label}' or a name matching "
              f"'{a.tests}'{' and ' + repr(a.only) if a.only else ''} (was it configured "
              "with RW_INTEGRATION_TESTS=ON?)", file=sys.stderr)
        return 2
    out = os.path.abspath(a.out or os.path.join(
        build, "stress-" + time.strftime("%Y%m%d-%H%M%S")))
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ)
    if sanitized(build):  # as tests/sanitize.sh runs them
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env.setdefault("ASAN_OPTIONS",
                       "detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=0")
        env.setdefault("HWLOC_COMPONENTS", "-pci")
        env.setdefault("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
        env.setdefault("LSAN_OPTIONS",
                       f"suppressions={src}/tests/lsan.supp:print_suppressions=0")
    locks = {name: threading.Lock() for t in chosen for name in t.locks}
    print(f"stress: {len(chosen)} test(s) of {build}, {a.runs} run(s), {a.jobs} at a "
          f"time, beside {a.hog} busy process(es); failures' output in {out}", flush=True)

    failures = {}  # name -> [(run, outcome, why, log)]
    slowest = {}  # name -> (its longest run's seconds, its timeout)
    counts = {"passed": 0, "skipped": 0, "failed": 0, "timeout": 0, "stopped": 0}
    started = time.monotonic()
    hog = Hog(a.hog)
    running = Running()
    stop = {"signal": None}

    # SIGINT or SIGTERM: the hog and every running test are killed, nothing more starts,
    # and the report says what ran.
    def on_signal(signum, _frame):
        stop["signal"] = signal.Signals(signum).name
        hog.stop()
        running.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        for run in range(1, a.runs + 1):
            run_dir = os.path.join(out, f"run-{run:03d}")
            os.makedirs(run_dir, exist_ok=True)
            t0 = time.monotonic()
            failed_here = 0
            with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
                futures = {}
                for i, t in enumerate(chosen):
                    # Two tests may share a name (ctest allows it): the position keeps
                    # their logs apart (one's removal once made the other's read fail).
                    log = os.path.join(run_dir, f"{i + 1:03d}-{slug(t.name)}.log")
                    futures[pool.submit(run_one, t, env, a.timeout, log, locks,
                                        running)] = (t, log)
                for f in concurrent.futures.as_completed(futures):
                    t, log = futures[f]
                    try:
                        outcome, seconds, why = f.result()
                    except Exception as e:  # the harness's own error: this test's, not all
                        outcome, seconds, why = "failed", 0.0, f"the harness failed: {e!r}"
                    counts[outcome] += 1
                    if outcome != "stopped":
                        limit = t.timeout or a.timeout
                        slowest[t.name] = (max(seconds, slowest.get(t.name, (0, 0))[0]),
                                           limit)
                    if outcome in ("failed", "timeout"):
                        failed_here += 1
                        failures.setdefault(t.name, []).append((run, outcome, why, log))
                        print(f"stress: run {run}: FAILED {t.name} ({why}, {seconds:.1f} s)"
                              f": {log}", flush=True)
                    elif os.path.exists(log):
                        os.remove(log)
            if not os.listdir(run_dir):
                os.rmdir(run_dir)
            if stop["signal"]:
                print(f"stress: stopped by {stop['signal']} in run {run}",
                      file=sys.stderr, flush=True)
                write_report(out, a, build, chosen, failures, counts, slowest, started, True)
                return 1
            print(f"stress: run {run}/{a.runs}: {len(chosen) - failed_here} of "
                  f"{len(chosen)} passed or skipped in {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        hog.stop()
    write_report(out, a, build, chosen, failures, counts, slowest, started,
                 stopped=False)
    return 1 if failures else 0


def write_report(out, a, build, chosen, failures, counts, slowest, started, stopped):
    wall = time.monotonic() - started
    lines = [f"stress: {a.runs} run(s) of {len(chosen)} test(s) of {build} beside "
             f"{a.hog} busy process(es), {a.jobs} at a time: {counts['passed']} passed, "
             f"{counts['skipped']} skipped, {counts['failed']} failed, "
             f"{counts['timeout']} timed out, {counts['stopped']} stopped, in {wall:.0f} s"
             + (" (stopped early)" if stopped else "")]
    for name in sorted(failures, key=lambda n: (-len(failures[n]), n)):
        runs = failures[name]
        lines.append(f"  {len(runs)}/{a.runs} failed: {name}")
        for run, outcome, why, log in runs:
            lines.append(f"    run {run}: {why}: {log}")
    if not failures and not stopped:
        lines.append("  no failures")
    # How close the slowest runs came to their timeouts: a margin that load eats.
    closest = sorted(slowest.items(), key=lambda kv: -kv[1][0] / kv[1][1])[:5]
    if closest:
        lines.append("  closest to their timeout (longest run of the test / its timeout):")
        for name, (seconds, limit) in closest:
            lines.append(f"    {seconds:.1f} / {limit:.0f} s ({100 * seconds / limit:.0f} %): "
                         f"{name}")
    text = "\n".join(lines) + "\n"
    print(text, end="", flush=True)
    with open(os.path.join(out, "report.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"build": build, "runs": a.runs, "tests": len(chosen), "hog": a.hog,
                   "jobs": a.jobs, "wall_s": round(wall, 1), "stopped": stopped,
                   "counts": counts,
                   "longest_s": {n: {"seconds": round(v[0], 1), "timeout_s": v[1]}
                                 for n, v in sorted(slowest.items())},
                   "failures": {n: [{"run": r, "outcome": o, "why": w, "log": l}
                                    for r, o, w, l in v] for n, v in failures.items()}},
                  f, indent=1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
