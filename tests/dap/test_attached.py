"""The one answer to "who is watching": a connected IDE, a person at a terminal, or nobody."""

import sys
import types

from tensor_dap.dap import attached


def test_nobody_when_piped_and_no_debugpy(monkeypatch):
    monkeypatch.delitem(sys.modules, "debugpy", raising=False)
    monkeypatch.setattr(sys, "stdin", open("/dev/null"))
    assert attached.watching() is None


def test_a_connected_ide_wins_over_the_terminal(monkeypatch):
    fake = types.SimpleNamespace(is_client_connected=lambda: True)
    monkeypatch.setitem(sys.modules, "debugpy", fake)  # stands in for a debugpy with a client (real one: dap tests)
    monkeypatch.setattr(attached, "interactive_terminal", lambda: True)
    assert attached.watching() == "dap"
    assert attached.watching(dap=False) == "terminal"
    fake.is_client_connected = lambda: False
    assert attached.watching() == "terminal"


def test_a_broken_debugpy_counts_as_not_attached(monkeypatch):
    def boom():
        raise RuntimeError("half-initialized")

    monkeypatch.setitem(sys.modules, "debugpy", types.SimpleNamespace(is_client_connected=boom))
    monkeypatch.setattr(attached, "interactive_terminal", lambda: False)
    assert attached.watching() is None
