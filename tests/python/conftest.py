"""A node for the binding's tests: rw-node --open-jobs, for the whole session."""

import pytest

from rwnode import running_node


@pytest.fixture(scope="session")
def node():
    with running_node("--open-jobs") as address:
        yield address
