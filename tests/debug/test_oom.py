"""Out of memory: the crash report says what the program's frames hold (a running total or a list kept with their
graphs, the model's and optimizer's bytes, the largest tensors by storage) and how to need less."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from crashes import run_script

from tensor_dap.debug.crash import build_report

pytestmark = pytest.mark.timeout(60)

TOO_MUCH = 1 << 50  # elements: the CPU allocator refuses at once ("can't allocate memory"), nothing is allocated


def _advice(fn) -> str:
    try:
        fn()
    except RuntimeError as exc:
        return build_report(exc).advice
    raise AssertionError("no error")


def test_a_running_total_of_the_loss_kept_with_its_graph_is_named():
    model = nn.Linear(8, 3)

    def train():
        total_loss = 0
        for _ in range(30):
            loss = F.cross_entropy(model(torch.randn(4, 8)), torch.tensor([0, 1, 2, 0]))
            loss.backward()
            total_loss += loss  # BUG: total_loss += loss.item()
        torch.empty(TOO_MUCH)

    advice = _advice(train)
    assert advice.startswith("tensor_dap: out of memory asking for 4096 TiB; what your frames hold:"), advice
    assert "`total_loss` is 30 additions kept with their graphs: if it is a running total of the loss" in advice
    assert "add `loss.item()` (or `loss.detach()`) instead" in advice


def test_a_sum_of_a_few_loss_terms_is_not_taken_for_a_running_total():
    def step():
        x = torch.randn(4, requires_grad=True)
        loss = x.sum() + x.mean() + x.pow(2).sum() + x.abs().sum()
        assert loss.grad_fn is not None
        torch.empty(TOO_MUCH)

    assert "additions kept" not in _advice(step)


def test_outputs_kept_with_their_graphs_in_a_list_are_named():
    model = nn.Linear(8, 3)

    def evaluate():
        preds = []
        for _ in range(4):
            preds.append(model(torch.randn(16, 8)))  # BUG: under grad, each keeps its graph
        torch.empty(TOO_MUCH)

    advice = _advice(evaluate)
    assert "`preds` (a list of 4) holds 4 tensors with their graphs" in advice, advice
    assert "evaluate under torch.no_grad()" in advice


def test_detached_outputs_are_not_blamed_and_the_largest_tensors_count_each_storage_once():
    def evaluate():
        preds = [torch.randn(16, 3) for _ in range(4)]
        big = torch.zeros(1024, 256)  # 1 MiB
        view = big[:10]  # the same storage: not counted twice
        assert view is not None and preds
        torch.empty(TOO_MUCH)

    advice = _advice(evaluate)
    assert "with their graphs" not in advice
    assert "largest tensors: `big` [1024, 256] float32 cpu 1.0 MiB;" in advice, advice
    assert "`view`" not in advice


def test_the_model_and_its_optimizer_state_are_counted():
    model = nn.Linear(256, 256)  # 257 KiB of parameters
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 256)).sum().backward()
    optimizer.step()

    def crash():
        assert model is not None and optimizer is not None
        torch.empty(TOO_MUCH)

    advice = _advice(crash)
    assert "`model` (Linear): 257 KiB of parameters, 257 KiB of gradients" in advice, advice
    assert "`optimizer` (Adam): 514 KiB of optimizer state" in advice


def test_cuda_out_of_memory_is_read_the_same_way():
    """torch's CUDA message, raised as torch.OutOfMemoryError by hand: there is no GPU here to fill."""
    kept = [torch.randn(4, requires_grad=True) * 2 for _ in range(3)]

    def crash():
        assert kept
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                     "79.15 GiB of which 1.20 GiB is free.")

    try:
        crash()
    except torch.OutOfMemoryError as exc:
        advice = build_report(exc).advice
    assert advice.startswith("tensor_dap: out of memory asking for 2.00 GiB;"), advice
    assert "`kept` (a list of 3) holds 3 tensors with their graphs" in advice


def test_other_errors_get_no_memory_advice():
    assert _advice(lambda: torch.zeros(2) @ torch.zeros(3)) == ""


def test_a_device_side_assert_says_where_to_find_the_op():
    """CUDA's late-reported kernel check (raised by hand: no GPU here)."""
    try:
        raise RuntimeError("CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously "
                           "reported at some other API call")
    except RuntimeError as exc:
        hint = build_report(exc).hint
    assert "CUDA_LAUNCH_BLOCKING=1" in hint and "an Embedding id >= its rows" in hint, hint


def test_tensor_dap_run_prints_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch\nw = torch.randn(3, requires_grad=True)\ntotal = 0\n"
                      "for _ in range(25):\n    total = total + (w * 2).sum()\n"
                      f"torch.empty({TOO_MUCH})\n")
    done = run_script(script)
    err = " ".join(done.stderr.split())
    assert done.returncode == 1
    assert "`total` is 25 additions kept with their graphs: if it is a running total" in err, err
