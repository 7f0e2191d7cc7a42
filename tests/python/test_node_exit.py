"""The tests' node launcher fails a test whose node died of a fault (tests/support/rwnode.py)."""

import os
import shutil
import signal

import pytest
from rwnode import Node


def test_a_node_that_dies_of_a_fault_fails_its_stop_with_its_log_kept():
    node = Node("--open-jobs")
    os.kill(node.proc.pid, signal.SIGSEGV)
    node.proc.wait(timeout=20)
    with pytest.raises(AssertionError) as failed:
        node.stop()
    message = str(failed.value)
    # The crash report (a plain build) or the sanitizer's (ASan takes the signal).
    assert ("died of SIGSEGV" in message and "rw-node: fatal signal SIGSEGV" in message
            or "logged a sanitizer report" in message), message
    assert os.path.exists(node.log_path)
    shutil.rmtree(node.tmp)


def test_a_node_stopped_by_sigterm_exits_0_and_leaves_nothing_behind():
    node = Node("--open-jobs")
    assert node.stop() == 0
    assert not os.path.exists(node.tmp)
