"""Tests mirror the package; the DAP client and shared fixtures live in harness/, the debugged scripts in debuggees/."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "harness"))


@pytest.fixture(autouse=True, scope="session")
def _bundles_out_of_the_checkout(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A watch in the test process writes its bundles under the working directory (``.tensor_dap/incidents``, the
    checkout when ``make test`` runs): they go to a temporary folder instead. Programs the tests run write under the
    ``cwd`` each test gives them."""
    from tensor_dap.triggers import incident

    incident.DEFAULT_DIR = str(tmp_path_factory.mktemp("incidents"))
