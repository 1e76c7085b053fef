"""The package's namespace: what ``dir(tensor_dap)`` (a notebook's or an editor's completion) offers is the API."""

from __future__ import annotations

import types

import tensor_dap


def test_dir_lists_the_api_and_its_subpackages_not_the_helpers_it_imports():
    names = {n for n in dir(tensor_dap) if not n.startswith("_")}
    assert set(tensor_dap.__all__) - {"__version__"} <= names
    assert not names & {"Any", "importlib", "annotations"}  # once offered beside watch and describe
    others = names - set(tensor_dap.__all__)
    assert all(isinstance(getattr(tensor_dap, n), types.ModuleType) for n in others), others
