"""Helpers of the package's tests: rw-node on a free loopback port, stopped (by its PID)
when the test is done with it; ranks run as threads of the test process."""

import contextlib
import os
import subprocess
import tempfile
import threading
import time


@contextlib.contextmanager
def running_node(*options):
    """Yields the HOST:PORT of an rw-node started with `options`."""
    tmp = tempfile.mkdtemp(prefix="rw-py-")
    port_file = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "node.log"), "w")
    proc = subprocess.Popen([os.environ["RW_NODE"], "--listen", "127.0.0.1:0", "--port-file",
                             port_file, "--no-pin", *options], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            assert proc.poll() is None, "rw-node exited: " + open(log.name).read()
            assert time.monotonic() < deadline, "rw-node did not start"
            time.sleep(0.05)
        yield open(port_file).read().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


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
