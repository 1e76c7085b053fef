"""The one save/restore of training state: RNG streams, buffers (rebinding too), modes, optimizer state."""

import random

import numpy as np
import torch
from torch import nn

from tensor_dap.state import (
    Buffers,
    capture_rng,
    kept,
    load_optimizer_state,
    optimizer_kept,
    optimizer_state,
    preserved,
    restore_rng,
    rng_kept,
    rngs_used,
)


class Counter(nn.Module):
    """A forward that rebinds its buffer (``self.n = self.n + 1``) instead of writing in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("n", torch.zeros(()))
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        self.n = self.n + 1
        return self.bn(x) + torch.rand(())


def test_rng_round_trip_covers_torch_python_and_numpy():
    state = capture_rng()
    first = (torch.rand(3), random.random(), np.random.rand())
    restore_rng(state)
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(first[0], again[0]) and first[1:] == again[1:]


def test_rngs_used_tells_which_streams_moved():
    before = capture_rng()
    assert rngs_used(before) == {"python": False, "numpy": False, "torch": False}
    torch.rand(2)
    assert rngs_used(before) == {"python": False, "numpy": False, "torch": True}
    before = capture_rng()
    random.random()
    np.random.rand()
    assert rngs_used(before) == {"python": True, "numpy": True, "torch": False}


def test_rngs_used_counts_a_stream_left_out_as_used():
    before = capture_rng(python=False, numpy=False, torch=False)
    assert rngs_used(before) == {"python": True, "numpy": True, "torch": True}


def test_preserved_puts_back_modes_buffers_rebinding_and_rng():
    model = Counter().train()
    model.bn.eval()
    n_before, mean_before = model.n, model.bn.running_mean.clone()
    model.bn.train()
    rng = capture_rng()
    expected_rand = torch.rand(())
    restore_rng(rng)
    with preserved(model):
        model.eval()
        model(torch.randn(4, 3))
        model.train()
        model(torch.randn(4, 3))
        assert model.n is not n_before and float(model.n) == 2
    assert model.n is n_before and float(model.n) == 0  # the original tensor is back, with its value
    assert torch.equal(model.bn.running_mean, mean_before) and model.bn.num_batches_tracked == 0
    assert model.training and model.bn.training
    assert torch.equal(torch.rand(()), expected_rand)


def test_buffers_save_reuses_storage_and_follows_rebinding():
    model = Counter()
    buffers = Buffers(model)
    assert buffers.names == ["n", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]
    first = buffers.save()
    again = buffers.save()
    assert all(a is b for a, b in zip(first.values, again.values))  # no allocation per step
    model(torch.randn(4, 3))  # rebinds n
    snap = buffers.save()
    assert snap.live[0] is model.n and float(snap.values[0]) == 1
    model(torch.randn(4, 3))
    buffers.restore(snap)
    assert float(model.n) == 1 and model.bn.num_batches_tracked == 1
    state = buffers.into(dict(model.state_dict()), snap)
    assert state["n"] is snap.values[0]


def test_kept_restores_grads_params_buffers_and_rng():
    model = nn.Linear(3, 2)
    params = list(model.parameters())
    model(torch.randn(2, 3)).sum().backward()
    grads = [p.grad for p in params]
    weights = [p.detach().clone() for p in params]
    buffers = Buffers(model)
    with kept(params, buffers):
        for p in params:
            p.grad = None
        with torch.no_grad():
            model.weight.add_(1)
    assert all(p.grad is g for p, g in zip(params, grads))
    assert all(torch.equal(p, w) for p, w in zip(params, weights))


def test_optimizer_state_copy_and_in_place_load():
    model = nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    saved = optimizer_state(opt)
    live_avg = opt.state[model.weight]["exp_avg"]
    with optimizer_kept(opt):
        opt.param_groups[0]["lr"] = 5.0
        opt.step()
        opt.step()
    assert opt.param_groups[0]["lr"] == 0.1
    assert opt.state[model.weight]["exp_avg"] is live_avg  # the same tensor, values put back
    assert torch.equal(live_avg, saved[model.weight]["exp_avg"])
    opt.step()
    load_optimizer_state(opt, saved)
    assert torch.equal(opt.state[model.weight]["step"], saved[model.weight]["step"])


def test_rng_kept_puts_back_only_the_streams_it_names():
    torch.manual_seed(0)
    random.seed(0)
    with rng_kept(numpy=False, torch=False):
        random.random()
        torch.rand(1)
    assert random.random() == random.Random(0).random()  # put back: as if nothing had drawn from it
    after = torch.rand(1)
    torch.manual_seed(0)
    torch.rand(1)
    assert torch.equal(after, torch.rand(1))  # not named: it moved on with the draw inside
    assert set(capture_rng(torch=False, numpy=False)) == {"python"}


def test_load_model_state_is_strict_and_writes_only_the_buffers_that_differ():
    import pytest
    import torch

    from tensor_dap.state import load_model_state

    model = torch.nn.BatchNorm1d(3)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved["weight"] += 1.0
    saved["running_mean"] += 2.0
    mean, var = model.running_mean, model.running_var
    load_model_state(model, saved)
    assert torch.equal(model.weight, saved["weight"]) and torch.equal(model.running_mean, saved["running_mean"])
    assert model.running_mean is mean and model.running_var is var  # loaded in place, as load_state_dict does
    with pytest.raises(RuntimeError, match="Unexpected key"):
        load_model_state(model, {**saved, "extra": torch.zeros(1)})
    with pytest.raises(RuntimeError, match="Missing key"):
        load_model_state(model, {k: v for k, v in saved.items() if k != "bias"})
