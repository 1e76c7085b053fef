"""The one answer to "whose code is this file": the user's, Python's, torch's, tensor_dap's or a package's."""

import os
import runpy


import torch

import tensor_dap
from tensor_dap.libraries import is_framework, is_user_file, library_of


def test_owners():
    assert library_of(torch.__file__) == "torch"
    assert library_of(tensor_dap.__file__) == "tensor_dap"
    assert library_of(runpy.__file__) == "python" and library_of("<frozen runpy>") == "python"
    assert library_of("<stdin>") == "python"
    import rich

    assert library_of(rich.__file__) == "rich" and not is_framework(rich.__file__)  # visible, not the user's
    assert is_user_file(__file__) and not is_framework(__file__)


def test_the_demo_script_plays_a_users_program():
    demo = os.path.join(os.path.dirname(tensor_dap.__file__), "demo", "train.py")
    assert is_user_file(demo) and not is_framework(demo)


def test_a_symlink_is_judged_by_its_target(tmp_path):
    link = tmp_path / "torch_init.py"
    link.symlink_to(torch.__file__)
    assert library_of(str(link)) == "torch"
