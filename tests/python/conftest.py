"""A node for the binding's tests: rw-node --open-jobs, for the whole session."""

import os
import sys

import pytest

# The tests' helpers (rwnode: the node launcher) live in tests/support.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))

from rwnode import running_node  # noqa: E402


@pytest.fixture(scope="session")
def node():
    with running_node("--open-jobs") as address:
        yield address
