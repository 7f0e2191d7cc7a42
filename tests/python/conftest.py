"""A node for the binding's tests: rw-node --open-jobs on a free loopback port, stopped
(by its PID) when the session ends."""

import os
import subprocess
import tempfile
import time

import pytest


@pytest.fixture(scope="session")
def node():
    binary = os.environ["RW_NODE"]
    tmp = tempfile.mkdtemp(prefix="rw-py-")
    port_file = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "node.log"), "w")
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--port-file", port_file,
                             "--open-jobs", "--no-pin"], stdout=log, stderr=log,
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
