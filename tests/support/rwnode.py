"""The Python tests' one node launcher: rw-node on a free loopback port, stopped by its
PID when the test is done with it; and ranks run as threads of the test process. A node
that dies of a fault (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) or logs a sanitizer's
report fails the test at its stop, its log kept; a clean stop (exit 0) removes its
directory.

    with running_node("--open-jobs") as address: ...     # HOST:PORT
    node = Node("--open-jobs", "--metrics", "127.0.0.1:9100"); ...; node.stop()
"""

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time


FAULTS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT)
SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "WARNING: ThreadSanitizer")


class Node:
    """rw-node --listen 127.0.0.1:0 --no-pin with `options`, its log in a file of its
    own; `address` once it listens (within 20 s, or the start fails, with its log)."""

    def __init__(self, *options, start_timeout=20):
        self.tmp = tempfile.mkdtemp(prefix="rw-py-")
        self.port_file = os.path.join(self.tmp, "port")
        self.log_path = os.path.join(self.tmp, "node.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [os.environ["RW_NODE"], "--listen", "127.0.0.1:0", "--port-file", self.port_file,
             "--no-pin", *options],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + start_timeout
            while not (os.path.exists(self.port_file) and open(self.port_file).read().strip()):
                assert self.proc.poll() is None, "rw-node exited: " + self.text()
                assert time.monotonic() < deadline, "rw-node did not start: " + self.text()
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise
        self.address = open(self.port_file).read().strip()

    def text(self):
        """What the node logged so far."""
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self, timeout=15):
        """SIGTERM (the node drains and stops), SIGKILL after `timeout` s; its exit
        code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()
        rc = self.proc.returncode
        why = self.crash(rc)
        if why:
            raise AssertionError(f"rw-node (pid {self.proc.pid}) {why}; its log, kept at "
                                 f"{self.log_path} (tail):\n{self.text()[-6000:]}")
        if rc == 0:  # kept otherwise: the test may show the log
            shutil.rmtree(self.tmp, ignore_errors=True)
        return rc

    def crash(self, rc):
        """Why the node's end was a crash ("" when it was not)."""
        if rc is not None and rc < 0 and -rc in FAULTS:
            return "died of " + signal.Signals(-rc).name
        try:
            text = self.text()
        except OSError:
            return ""
        for report in SANITIZER_REPORTS:
            if report in text:
                return f"logged a sanitizer report ({report})"
        return ""


@contextlib.contextmanager
def running_node(*options):
    """Yields the HOST:PORT of an rw-node started with `options`."""
    node = Node(*options)
    try:
        yield node.address
    finally:
        node.stop()


def run_ranks(workers, body):
    """Runs body(rank) for every rank in its own thread (the GIL is released while a
    call waits); re-raises the first failure."""
    errors = []

    def one(rank):
        try:
            body(rank)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=one, args=(r,)) for r in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    if errors:
        raise errors[0]
