"""``watch`` around an unchanged loop: gradient accumulation, data fetched inside the step, AMP,
sparse gradients, closure optimizers, ``break_if`` inside a watch, and what happens after a report.

Every loop here is written as users write them, with no ``w.step``; where the exact mode can run
the same training, the test asserts that both name the same place.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings

import origins
from markers import file_marker_line
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tensor_dap
from tensor_dap import LossThresholdError, NonFiniteError
from tensor_dap.triggers.fixes import DIAGNOSES
from tensor_dap.triggers.report import to_text

pytestmark = [pytest.mark.timeout(90), pytest.mark.filterwarnings("ignore::UserWarning")]
MICRO = 4


def where(report):
    return report.step, report.phase, report.module, report.op, report.source


# ------------------------------------------------------------------ gradient accumulation

def accumulation(bug, loop):
    """4 micro-batches per optimizer step; the bug is in the third micro-batch of step 1."""
    model, optimizer, batch, _ = origins.build(bug)

    def micro_step(k):
        _, loss = model(*batch(k - 2))  # micro-batch k - 2 == BUG_STEP is step 1's third one
        (loss / MICRO).backward()
        return loss

    def whole_step(step):
        for i in range(MICRO):
            loss = micro_step(step * MICRO + i)
        optimizer.step()
        optimizer.zero_grad()
        return loss

    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(3):
            whole_step(step) if loop else w.step(whole_step, step)
    return info.value.report


@pytest.mark.parametrize("bug", ["masked_softmax", "where_sqrt"])
def test_gradient_accumulation_loop_names_what_w_step_names(bug):
    loop, exact = accumulation(bug, loop=True), accumulation(bug, loop=False)
    assert where(loop) == where(exact)
    assert (loop.step, loop.module, loop.op) == (1, *[origins.EXPECTED[bug][i] for i in (0, 2)])


# ------------------------------------------------------------------ data fetched inside the step

def fetching(bug, watched, steps=8, on="raise", compiled=False):
    """nanoGPT's loop: the next batch is drawn (from torch's RNG) between forward and backward.
    ``compiled``: the loop calls (and watch is given) ``torch.compile(model)`` (dynamo with its eager
    backend: the same wrapping and tracing, no code generation); "raw": the loop calls the compiled
    model while watch is given the model it wraps (nanoGPT keeps both)."""
    model, optimizer, batch, _ = origins.build(bug)
    called = torch.compile(model, backend="eager") if compiled else model
    if compiled != "raw":
        model = called
    data = torch.randint(0, 32, (64, 9), generator=torch.Generator().manual_seed(3))

    def get_batch():
        rows = data[torch.randint(0, 64, (4,))]
        return rows[:, :-1], rows[:, 1:]

    w = tensor_dap.watch(model, optimizer, on=on, capture=False) if watched else None
    try:
        x, y = get_batch()
        for it in range(steps):
            _, pad, _ = batch(it)
            _, loss = called(x, pad, y)
            x, y = get_batch()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    finally:
        if w is not None:
            w.close(flush=False)
    return model, w


@pytest.mark.parametrize("bug", ["masked_softmax", "where_sqrt"])
def test_a_loop_fetching_data_inside_the_step_is_localized_exactly(bug):
    with pytest.raises(NonFiniteError) as info:
        fetching(bug, watched=True)
    report = info.value.report
    module, phase, op = origins.EXPECTED[bug]
    assert (report.step, report.module, report.phase, report.op) == (origins.BUG_STEP, module, phase, op)
    assert report.source["line"] == origins.birth_line(bug) and report.mode == "loop"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own imports
@pytest.mark.parametrize("bug", ["masked_softmax", "where_sqrt"])
def test_a_compiled_model_is_watched_around_its_compiled_code_and_named_as_written(bug):
    """The hooks sit on the compiled module (outside dynamo's graph); reports name the user's modules
    (no ``_orig_mod.``) and the re-run runs the original module eagerly; numerics stay bit-identical."""
    with pytest.raises(NonFiniteError) as info:
        fetching(bug, watched=True, compiled=True)
    report = info.value.report
    module, phase, op = origins.EXPECTED[bug]
    assert (report.step, report.module, report.phase, report.op) == (origins.BUG_STEP, module, phase, op)
    assert report.source["line"] == origins.birth_line(bug) and report.mode == "loop"
    torch.manual_seed(11)
    plain, _ = fetching(bug, watched=False, compiled=True)
    torch.manual_seed(11)
    watched, _ = fetching(bug, watched=True, on="log", compiled=True)
    for k, v in plain.state_dict().items():
        assert torch.equal(v.nan_to_num(), watched.state_dict()[k].nan_to_num()), k


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own imports
@pytest.mark.parametrize("bug", ["masked_softmax", "where_sqrt"])
def test_a_watched_model_called_through_torch_compile_is_captured_with_no_graph_break_in_its_code(bug):
    """watch(model) while the loop calls torch.compile(model): dynamo runs the capture around the model's call as
    plain Python and compiles the model inside it. Before, it traced the capture's own code: "Dynamo does not know
    how to trace the builtin sys._getframe" (and os.lstat), a graph break in each."""
    import torch._dynamo.utils

    counters = torch._dynamo.utils.counters
    counters.clear()
    with warnings.catch_warnings(record=True) as seen, pytest.raises(NonFiniteError) as info:
        warnings.simplefilter("always")
        fetching(bug, watched=True, compiled="raw")
    report = info.value.report
    module, phase, op = origins.EXPECTED[bug]
    assert (report.step, report.module, report.phase, report.op) == (origins.BUG_STEP, module, phase, op)
    assert report.source["line"] == origins.birth_line(bug) and report.mode == "loop"  # the capture saw each forward
    assert not [str(w.message) for w in seen if "Dynamo" in str(w.message)]
    breaks = [reason for reason in counters["graph_break"] if "disable" not in reason]  # ours: the one intended
    assert not breaks, breaks


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torch_export_of_a_watched_model_traces_the_model_alone():
    """torch.export refuses the mark that keeps dynamo out of the capture: a model exported inside a watch (after
    torch.compile loaded dynamo) is exported from its own call, in both of export's modes."""
    import torch._dynamo  # noqa: F401 - loaded, as by any torch.compile before: the capture is marked

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 4)
    with tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(2):
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        for strict in (False, True):
            program = torch.export.export(model, (x,), strict=strict)
            assert torch.equal(program.module()(x), model(x))


def test_unchanged_loop_numerics_and_rng_are_bit_identical_even_after_a_report():
    torch.manual_seed(11)
    plain, _ = fetching("masked_softmax", watched=False)
    plain_draw = torch.rand(3)
    torch.manual_seed(11)
    watched, w = fetching("masked_softmax", watched=True, on="log")
    assert len(w.reports) == 1 and w.reports[0].op == "softmax"
    for k, v in plain.state_dict().items():
        assert torch.equal(v.nan_to_num(), watched.state_dict()[k].nan_to_num()), k
    assert torch.equal(plain_draw, torch.rand(3))


def test_the_capture_keeps_references_not_copies_and_rerun_false_keeps_nothing():
    model, optimizer, batch, step_fn = origins.build("zero_norm")
    x, y = batch(0)
    with tensor_dap.watch(model, optimizer, capture=False) as w:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        assert w._loop.forwards[0].args[0] is x  # the batch itself, not a copy
        optimizer.step()
    with tensor_dap.watch(model, optimizer, capture=False, rerun=False) as w:
        assert w._loop is None
        step_fn(x, y)


def test_the_step_lets_go_of_the_outputs_and_keeps_the_gradient_they_received():
    """After the optimizer step only the gradient that reached the outputs is kept (for a later replay or
    bundle): the outputs and their autograd graph are freed where the loop frees them."""
    import weakref

    model, optimizer, batch, _ = origins.build("zero_norm")
    x, y = batch(0)
    with tensor_dap.watch(model, optimizer, capture=False) as w:
        optimizer.zero_grad()
        out = model(x)
        F.cross_entropy(out, y).backward()
        seen = out.grad.clone()
        optimizer.step()
        gone = weakref.ref(out)
        del out
        assert gone() is None  # nothing of watch holds the output any more
        kept = w._loop.forwards[0].output_grads()[0]
        assert kept is not None and torch.equal(kept, seen)


def _nan_input_report(call):
    """The report of a NaN in the batch of step 1, where ``call(model, x)`` calls the model (torch's own
    Linear layers run the op: it is charged to the user's line that called the model)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(3):
            x = torch.randn(3, 4)
            x[0, 0] = float("nan") if step == 1 else x[0, 0]
            optimizer.zero_grad()
            F.cross_entropy(call(model, x), torch.tensor([0, 1, 0])).backward()
            optimizer.step()
    return info.value.report


def _through_a_helper(model, x):
    return model(x)  # the line a report must name


def _through_torch(model, x):
    return torch.func.functional_call(model, dict(model.named_parameters()), (x,))  # the line a report must name


@pytest.mark.parametrize("call", [_through_a_helper, _through_torch], ids=["helper", "torch-frames-between"])
def test_the_line_that_called_the_model_is_the_first_user_frame_above_it(call):
    report = _nan_input_report(call)
    assert report.op == "linear" and report.source is not None
    assert report.source["text"].endswith("# the line a report must name")


def test_a_model_called_many_times_in_a_step_drops_the_capture_not_the_run():
    from tensor_dap.triggers.loop import MAX_FORWARDS

    model, optimizer, batch, step_fn = origins.build("zero_norm")
    x, y = batch(0)
    with tensor_dap.watch(model, optimizer, capture=False) as w:
        for _ in range(MAX_FORWARDS + 5):
            model(x)
        assert w._loop.dropped and not w._loop.replayable
        step_fn(x, y)  # the next step captures again
        step_fn(x, y)
        assert w._loop.replayable


# ------------------------------------------------------------------ the forward hook alone, where it is enough

def _train(model, optimizer, steps, x, y):
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()  # the line that called the model
        optimizer.step()


@pytest.mark.parametrize("extra, draws", [(nn.Identity(), False), (nn.Dropout(0.1), True), (nn.BatchNorm1d(8), False)],
                         ids=["nothing-to-read", "draws-randomness", "has-buffers"])
def test_the_model_call_is_wrapped_with_no_module_hooks(extra, draws):
    """The capture sits in the model's ``_compiled_call_impl`` (torch's fast path stays: no hooks to dispatch);
    what it records is the batch, the caller's line, the RNG states the forward draws from, the output's
    gradient; closing gives the model its own call back."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), extra, nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 0])
    with tensor_dap.watch(model, optimizer, capture=False) as w:
        _train(model, optimizer, 3, x, y)
        assert not model._forward_pre_hooks and not model._forward_hooks and model._compiled_call_impl is not None
        optimizer.zero_grad()
        out = model(x)  # the line that called the model
        [f] = w._loop.forwards
        assert f.args[0] is x and f.call is not None and f.call.text.endswith("# the line that called the model")
        assert ("torch" in f.rng) == draws  # a forward drawing no randomness needs no RNG state
        F.cross_entropy(out, y).backward()
        assert w._loop.replayable and w._loop.forwards[0].output_grads()[0] is not None
        optimizer.step()
    assert "_compiled_call_impl" not in model.__dict__ and not model._forward_hooks  # its own call back


def test_a_model_that_starts_drawing_randomness_later_is_probed_again(monkeypatch):
    """Every PROBE_EVERY-th forward keeps every RNG state to see which ones it draws from: dropout switched
    on mid-run is found and its RNG state kept from then on (a replay needs the same mask)."""
    from tensor_dap.state import RngUse

    monkeypatch.setattr(RngUse, "PROBE_EVERY", 5)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.0), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 0])
    with tensor_dap.watch(model, optimizer, capture=False) as w:
        _train(model, optimizer, 2, x, y)
        assert w._loop.forwards[0].rng == {}
        model[1].p = 0.5  # from now on the forward draws from torch's RNG
        _train(model, optimizer, 7, x, y)
        assert "torch" in w._loop.forwards[0].rng


def test_a_root_module_calling_itself_is_one_forward():
    """The inner calls run inside the outer one: the step records the outer call, with its arguments."""
    class Recursive(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x, depth=1):
            return self.lin(x) if depth == 0 else self(x, depth=depth - 1)

    torch.manual_seed(0)
    model = Recursive()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 0])
    with tensor_dap.watch(model, optimizer, capture=False) as w:
        _train(model, optimizer, 2, x, y)
        optimizer.zero_grad()
        F.cross_entropy(model(x, depth=2), y).backward()
        [f] = w._loop.forwards
        assert f.args == (x,) and f.kwargs == {"depth": 2} and f.output_grads()[0] is not None


def test_the_wrapped_call_survives_compile_in_place_pickling_and_the_users_hooks(tmp_path):
    """``model.compile()`` after the watch began replaces torch's call: the capture wraps the compiled one at
    the next step. A copy or a pickle of the model leaves the capture out; the user's own hooks still run."""
    import copy

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(3, 4), torch.tensor([0, 1, 0])
    with tensor_dap.watch(model, optimizer, capture=False) as w:
        _train(model, optimizer, 2, x, y)
        twin = copy.deepcopy(model)
        assert "_compiled_call_impl" not in twin.__dict__ and twin(x).shape == (3, 2)
        torch.save(model, tmp_path / "model.pt")
        assert "_compiled_call_impl" not in torch.load(tmp_path / "model.pt", weights_only=False).__dict__
        seen = []
        model.register_forward_hook(lambda m, a, out: seen.append(out.shape))
        _train(model, optimizer, 2, x, y)
        assert len(seen) == 2
        compiled = []
        model._compiled_call_impl = lambda *a, **k: compiled.append(1) or model._call_impl(*a, **k)  # as compile() does
        _train(model, optimizer, 1, x, y)  # its step ends with the capture around the new call
        _train(model, optimizer, 2, x, y)
        assert len(compiled) == 3 and len(w._loop.forwards) == 1 and w._loop.forwards[0].args[0] is x
    assert model._compiled_call_impl is not None and model(x).shape == (3, 2) and len(compiled) == 4


# ------------------------------------------------------------------ AMP: GradScaler

def amp_loop(bug, init_scale, steps, boost=1.0, **watch_kw):
    model, optimizer, batch, _ = origins.build(bug)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=1000)
    with tensor_dap.watch(model, optimizer, capture=False, **watch_kw) as w:
        for step in range(steps):
            optimizer.zero_grad()
            _, loss = model(*batch(step))
            scaler.scale(loss * boost).backward()
            scaler.step(optimizer)
            scaler.update()
    return w, scaler


def test_amp_overflow_skips_are_not_alarms_in_an_unchanged_loop():
    w, scaler = amp_loop("masked_softmax", 2.0 ** 127, origins.BUG_STEP, boost=1e3)  # the early steps overflow
    assert scaler.get_scale() < 2.0 ** 127 and w.reports == []


def _autocast_loop(steps: int, overflow_at: int | None) -> tuple[tensor_dap.watch, torch.amp.GradScaler]:
    """float16 autocast on the CPU with a GradScaler whose first scale is far too large (its first 7 steps
    overflow and are skipped, before any update); at ``overflow_at`` a batch past float16's range comes in."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 24)
    with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(steps):
            x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(model(x * 1e5 if step == overflow_at else x), y)  # AUTOCAST-OVERFLOW
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    return w, scaler


def test_steps_a_grad_scaler_skips_before_the_first_update_are_counted():
    """Each skipped step is a step, the first ones too (no update has run yet to tell a reset of the gradients by):
    the step a report names is the loop's own count."""
    w, scaler = _autocast_loop(12, None)
    assert scaler.get_scale() == 2.0 ** 17 and w.reports == [] and w.step_count == 12  # 7 skipped, not alarms
    with pytest.raises(NonFiniteError) as info:
        _autocast_loop(30, 25)
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (25, "forward", "0", "linear")
    assert report.source["line"] == file_marker_line(__file__, "AUTOCAST-OVERFLOW")
    assert report.diagnosis == DIAGNOSES["fp16"]  # autocast cast the float32 batch inside the op: its output is half


def test_a_collapsing_grad_scaler_fires_and_names_the_op():
    """After clean steps the scaler is found on the stack; a real backward NaN makes every step skip."""
    with pytest.raises(NonFiniteError) as info:
        amp_loop("where_sqrt", 8.0, origins.BUG_STEP + 8, on="raise")
    report = info.value.report
    assert report.kind == "scaler" and "collapsed" in report.headline and "collapsed" in report.diagnosis
    assert (report.phase, report.module, report.op) == ("backward", "blocks.1.mlp", "SqrtBackward0")


def test_a_non_finite_loss_fires_even_when_the_scaler_skips_the_step():
    def run(watched):
        model, optimizer, batch, _ = origins.build("log_zero_loss")
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)

        def amp_step(x, y, scale):
            optimizer.zero_grad()
            loss = origins.soft_target_loss(model(x) * scale, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            return loss

        w = tensor_dap.watch(model, optimizer, on="log", capture=False) if watched else None
        for step in range(origins.BUG_STEP + 1):
            w.step(amp_step, *batch(step)) if w else amp_step(*batch(step))
        if w:
            w.close()
        return w, scaler.get_scale()

    w, scale = run(True)
    [report] = w.reports
    assert (report.step, report.phase, report.op) == (origins.BUG_STEP, "loss", "log")
    assert scale == run(False)[1] < 2.0 ** 10  # it skipped; the re-run through scaler.step/update changed nothing


# ------------------------------------------------------------------ sparse gradients, closures

class SparseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8, sparse=True)
        self.head = nn.Linear(8, 1)

    def forward(self, idx):
        h = self.emb(idx)
        return self.head(torch.where(h > 0, torch.sqrt(h.abs()), h) * (h != 0))  # sqrt'(0) in backward


def test_a_nan_in_a_sparse_gradient_is_caught_before_the_update():
    torch.manual_seed(0)
    model = SparseNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(6):
            idx = torch.tensor([1, 2, 3])
            if step == 3:
                with torch.no_grad():
                    model.emb.weight[5] = 0.0  # a zero embedding row: sqrt's gradient at 0 is Inf
                idx = torch.tensor([1, 5, 3])
            optimizer.zero_grad()
            model(idx).sum().backward()
            assert model.emb.weight.grad.is_sparse
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (3, "backward", "SqrtBackward0")
    assert torch.isfinite(model.emb.weight).all()  # the NaN update was never applied


@pytest.mark.parametrize("loop", [True, False])
def test_lbfgs_closure_is_checked_before_its_update(loop):
    model, _, batch, _ = origins.build("nan_batch")
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)

    def step_fn(x, y, scale):
        def closure():
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            return loss
        return optimizer.step(closure)

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(origins.BUG_STEP + 2):
            step_fn(*batch(step)) if loop else w.step(step_fn, *batch(step))
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (origins.BUG_STEP, "input", "inp", "linear")
    assert all(torch.isfinite(p).all() for p in model.parameters())  # caught before LBFGS updated anything
    sections = [section for section, _, _ in report.tensors]  # the batch as the op's input, not again as its output
    assert sections.count("op inputs") == 1 and "op output" not in sections


# ------------------------------------------------------------------ break_if inside watch; after a report

@pytest.mark.parametrize("loop", [True, False])
def test_break_if_inside_watch_writes_a_bundle_that_replays(tmp_path, loop):
    model, optimizer, batch, step_fn = origins.build("exploding_lr")
    with pytest.raises(LossThresholdError) as info, \
            tensor_dap.watch(model, optimizer, on="raise", capture=str(tmp_path)) as w:
        for step in range(origins.BUG_STEP + 8):
            loss = step_fn(*batch(step)) if loop else w.step(step_fn, *batch(step))
            tensor_dap.break_if(loss, above=100.0, on="raise")
    report = info.value.report
    assert report.bundle and report.kind == "above" and "diverged" in report.diagnosis
    assert report.lr and report.lr[0] > 0.01 and len(report.loss_history) >= 3
    assert report.mode == ("loop" if loop else "step") and report in w.reports
    step_arg = None if loop else step_fn
    assert tensor_dap.replay(report.bundle, model, step_arg, optimizer, on="raise") is None  # finite: it runs clean


def test_after_a_report_each_non_finite_step_says_so_and_the_end_counts_them(monkeypatch, capsys):
    from tensor_dap.triggers import aftermath

    monkeypatch.setattr(aftermath, "INTERVAL", 0.0)
    model, optimizer, batch, step_fn = origins.build("nan_batch")
    with tensor_dap.watch(model, optimizer, on="log", capture=False) as w:
        for step in range(origins.BUG_STEP + 4):
            step_fn(*batch(step))  # after the NaN batch the parameters stay NaN
    err = capsys.readouterr().err
    assert len(w.reports) == 1
    assert err.count("is non-finite too") == 3
    assert f"4 of the {origins.BUG_STEP + 4} steps watched were non-finite (the first at step {origins.BUG_STEP})" \
        in err


def test_the_follow_up_lines_are_rate_limited(capsys):
    model, optimizer, batch, step_fn = origins.build("nan_batch")
    with tensor_dap.watch(model, optimizer, on="log", capture=False):
        for step in range(origins.BUG_STEP + 30):
            step_fn(*batch(step))
    err = capsys.readouterr().err
    assert err.count("is non-finite too") <= 2 and "30 of the" in err


def test_the_scaler_threshold_is_documented_value():
    from tensor_dap.triggers.watch import MIN_SCALE

    assert math.isfinite(MIN_SCALE) and MIN_SCALE == 1.0


# ------------------------------------------------------------------ attach: for tensor-dap run --guard

def test_attach_finds_the_model_from_the_optimizer_and_localizes():
    """What `tensor-dap run --guard` does: only the optimizer is known; the model is found at its first forward."""
    model, optimizer, batch, step_fn = origins.build("zero_norm")
    attached = tensor_dap.attach(optimizer, on="raise", capture=False)
    try:
        assert attached.watch is None
        with pytest.raises(NonFiniteError) as info:
            for step in range(origins.BUG_STEP + 2):
                step_fn(*batch(step))
        assert attached.watch is not None and attached.watch.model is model
    finally:
        attached.close()
    report = info.value.report
    assert (report.step, report.module, report.op) == (origins.BUG_STEP, "norm", "div")
    assert not model._forward_pre_hooks and not model._forward_hooks  # close() took every hook away


# ------------------------------------------------------------------ the loss of a loop whose loss is outside the model

@pytest.mark.parametrize("micro", [MICRO, 40])  # 40: more micro-batches than the history keeps losses
def test_unchanged_loop_reports_carry_the_loss_given_to_backward_and_its_history(micro):
    """The usual loop computes its loss outside the model: the report still has its value and history
    (with accumulation, the sum of the micro-batch losses handed to backward, as their gradients sum)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(8, 6), torch.randn(8, 1)
    seen = []
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(6):
            total = 0.0
            for k in range(micro):
                xb = x.clone()
                if step == 4 and k == 2:
                    xb[0, 0] = float("nan")  # a NaN in one micro-batch of step 4
                loss = F.mse_loss(model(xb), y) / micro
                loss.backward()
                total += loss.item()
            seen.append(total)
            optimizer.step()
            optimizer.zero_grad()
    report = info.value.report
    assert report.step == 4
    assert math.isnan(report.loss)  # the step's loss: the NaN micro-batch is in its sum
    history = report.loss_history
    assert len(history) == 5 and math.isnan(history[-1])
    assert history[:-1] == pytest.approx(seen[:4], rel=1e-6)


def test_the_loss_tap_sees_through_loss_scaling_and_skips_what_is_not_a_loss():
    from tensor_dap.triggers.loss_tap import listen

    model = nn.Linear(4, 1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x = torch.randn(8, 4)
    got = []
    stop = listen(got.append)
    try:
        loss = model(x).pow(2).mean()
        scaler.scale(loss).backward()  # the scaled loss is traced back to the loss it scaled
        model(x).backward(torch.ones(8, 1))  # a vector-Jacobian product: not a loss
        (model(x).sum() * 2).backward()
    finally:
        stop()
    assert got[0] is loss and len(got) == 2 and got[1].item() == pytest.approx(2 * model(x).sum().item())
    # the last listener gone, torch is as it was
    assert not hasattr(torch.autograd.backward, "__wrapped__")
    assert not hasattr(torch.amp.GradScaler.scale, "__wrapped__")
    assert not hasattr(torch.autograd.grad, "__wrapped__")


def test_the_loss_tap_notes_where_gradients_of_gradients_are_taken():
    from tensor_dap.triggers.loss_tap import double_backward_line, listen

    x = torch.ones(3, requires_grad=True)
    stop = listen(lambda loss: None)
    try:
        torch.autograd.grad((x ** 2).sum(), x)  # first order only: not noted
        assert double_backward_line() is None
        torch.autograd.grad((x ** 3).sum(), x, None, None, True)  # create_graph given by position
        line = double_backward_line()
        assert line is not None and line.text.startswith("torch.autograd.grad((x ** 3).sum(), x, None, None, True)")
        g, = torch.autograd.grad((x ** 2).sum(), x, create_graph=True)
        assert g.requires_grad and double_backward_line().text.startswith("g, = torch.autograd.grad(")  # the latest
    finally:
        stop()
    assert double_backward_line() is None  # forgotten with the last listener


def test_break_if_inside_an_unchanged_loop_adds_each_loss_to_the_history_once():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    seen = []
    with pytest.raises(LossThresholdError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(5):
            loss = F.mse_loss(model(x), y * (1000.0 if step == 3 else 1.0))
            tensor_dap.break_if(loss, above=100.0)  # before backward, as tensor-dap run --loss-above checks it
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            seen.append(loss.item())
    report = info.value.report
    assert report.step == 3 and report.loss > 100
    assert report.loss_history == pytest.approx(seen)  # steps 0-2, each once


def test_a_re_run_adds_nothing_to_the_step_it_re_runs():
    """Localizing re-runs the step's forwards with the capture off: the step keeps its own forward, with the line
    that called backward() (a re-run forward, with its gradients reset, would open a step of its own in the
    capture and take its place), and the capture is on again for the next step."""
    model, optimizer, batch, _ = origins.build("masked_softmax")
    w = tensor_dap.watch(model, optimizer, on="raise", capture=False)
    try:
        with pytest.raises(NonFiniteError) as info:
            for it in range(8):
                x, pad, y = batch(it)
                _, loss = model(x, pad, y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        assert info.value.report.step == origins.BUG_STEP
        forwards = w._loop.forwards
        assert len(forwards) == 1 and w._loop.enabled
        assert forwards[0].line is not None and forwards[0].line.text == "loss.backward()"  # not a re-run's
    finally:
        w.close(flush=False)


@pytest.mark.parametrize("bug", ["zero_norm", "log_zero_loss", "nan_batch", "fp16_matmul"])
def test_the_plain_steps_shortcut_ends_each_step_as_the_general_path_does(bug, monkeypatch):
    """An unchanged loop's ordinary update takes a shortcut (``_plain_update``): it must leave what the general
    path leaves (steps counted, sentinel reads, loss history) and fire the same report at the same step."""
    from tensor_dap.triggers.loop_steps import LoopSteps

    shortcut = LoopSteps._plain_update

    def run(general: bool):
        taken = []
        monkeypatch.setattr(LoopSteps, "_plain_update",
                            lambda self: False if general else taken.append(shortcut(self)) or taken[-1])
        model, optimizer, batch, step_fn = origins.build(bug)
        w = tensor_dap.watch(model, optimizer, on="log", capture=False)
        states = []
        for step in range(origins.BUG_STEP + 2):
            step_fn(*batch(step))
            states.append((w.step_count, w._watched, w.reads, w._latched, list(map(float, w._history))))
        w.close(flush=False)
        report = w.reports[0]
        return taken, states, (where(report), report.loss, report.loss_history)

    taken, shortcut_states, shortcut_report = run(general=False)
    assert taken.count(True) >= origins.BUG_STEP  # the shortcut was the way every clean step went
    _, general_states, general_report = run(general=True)
    assert repr(shortcut_states) == repr(general_states)  # (repr: NaN losses compare equal)
    assert repr(shortcut_report) == repr(general_report)


def test_a_failure_after_clean_steps_is_news_again_on_either_path(monkeypatch):
    """After a report, steps that stay non-finite are counted, not reported; once a step is clean again, the next
    failure is reported anew, whether the steps took the shortcut or the general path."""
    from tensor_dap.triggers.loop_steps import LoopSteps

    shortcut = LoopSteps._plain_update

    def run(general: bool):
        monkeypatch.setattr(LoopSteps, "_plain_update", (lambda self: False) if general else shortcut)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(16, 4), torch.randn(16, 1)
        poisoned = {2, 3, 6}
        with tensor_dap.watch(model, optimizer, on="log", capture=False) as w:
            for step in range(8):
                clean = [p.detach().clone() for p in model.parameters()]
                optimizer.zero_grad()
                out = model(x)
                if step in poisoned:  # a NaN gradient at the output, this step only
                    out.register_hook(lambda g: g * float("nan"))
                F.mse_loss(out, y).backward()
                optimizer.step()
                with torch.no_grad():  # undo a poisoned update: the next step is clean again
                    for p, c in zip(model.parameters(), clean):
                        p.copy_(c) if not torch.isfinite(p).all() else None
        return [r.step for r in w.reports], w.suppressed

    assert run(general=False) == run(general=True) == ([2, 6], 1)


# ------------------------------------------------------------------ updates by hand, no torch.optim

def _loss_by_hand(bug, model, b):
    """The loss of origins' training for ``bug`` (its step function without the optimizer)."""
    if bug in ("masked_softmax", "where_sqrt"):
        return model(*b)[1]
    x, y, scale = b
    out = model(x)
    return origins.soft_target_loss(out * scale, y) if bug == "log_zero_loss" else F.mse_loss(out, y)


def train_by_hand(model, batch, loss_of, steps, lr=1e-2, seen=None):
    """pytorch/examples' word language model: ``model.zero_grad()``, backward, then ``p.data.add_(p.grad)``.
    ``seen``: gets each step's parameters from just before its update."""
    for step in range(steps):
        model.zero_grad()
        loss = loss_of(model, batch(step))
        if seen is not None:
            seen.append([p.detach().clone() for p in model.parameters()])
        loss.backward()
        for p in model.parameters():
            if p.grad is not None:
                p.data.add_(p.grad, alpha=-lr)


@pytest.mark.parametrize("bug", ["masked_softmax", "where_sqrt", "nan_batch", "log_zero_loss"])
def test_a_loop_updating_by_hand_is_checked_before_its_update_and_localized(bug, tmp_path):
    """With no torch.optim optimizer, each backward() is a step, checked as it returns: the stop comes before
    the update by hand (the parameters are that step's), and the birthplace is the one w.step names."""
    model, _, batch, _ = origins.build(bug)
    seen = []
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, on="raise", capture=str(tmp_path)) as w:
        train_by_hand(model, batch, functools.partial(_loss_by_hand, bug), origins.BUG_STEP + 3, seen=seen)
    report = info.value.report
    module, phase, op = origins.EXPECTED[bug]
    assert (report.step, report.module, report.phase, report.op) == (origins.BUG_STEP, module, phase, op)
    if bug == "log_zero_loss":  # outside the model: the backward() it reached (the loss function is not re-run)
        assert report.source["text"] == "loss.backward()" and report.source["file"] == __file__
    else:
        assert report.source["line"] == origins.birth_line(bug)
    assert report.mode == "loop" and w.step_count == origins.BUG_STEP == len(seen) - 1
    assert len(report.loss_history) == origins.BUG_STEP + 1
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), seen[-1]))  # not updated with NaN
    assert f"tensor_dap.replay({report.bundle!r}, model)" in to_text(report)  # no optimizer to pass
    if bug != "log_zero_loss":  # (the loss function is not in an unchanged loop's bundle)
        with pytest.raises(NonFiniteError) as again:
            tensor_dap.replay(report.bundle, model, on="raise")
        assert (again.value.report.module, again.value.report.op) == (module, op)


def test_a_loop_updating_by_hand_keeps_its_numerics_and_counts_its_non_finite_steps(monkeypatch, capsys):
    from tensor_dap.triggers import aftermath

    monkeypatch.setattr(aftermath, "INTERVAL", 0.0)
    steps, loss_of = origins.BUG_STEP + 3, functools.partial(_loss_by_hand, "where_sqrt")

    def run(watched):
        model, _, batch, _ = origins.build("where_sqrt")
        torch.manual_seed(7)
        w = tensor_dap.watch(model, on="log", capture=False) if watched else None
        train_by_hand(model, batch, loss_of, steps)
        if w is not None:
            w.close()
        return [p.detach().clone() for p in model.parameters()] + [torch.rand(3)], w

    plain, _ = run(watched=False)
    params, w = run(watched=True)
    assert all(torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(plain, params))
    assert (w.step_count, w.reads, len(w.reports)) == (steps, steps, 1)
    err = capsys.readouterr().err
    assert err.count("is non-finite too") == 2
    assert f"3 of the {steps} steps watched were non-finite (the first at step {origins.BUG_STEP})" in err


def test_an_optimizer_stepping_later_takes_over_the_check_and_each_step_counts_once():
    """No optimizer given: the first step is checked as backward() returns, then the optimizer that steps takes
    the check over (its pre-step hook): every step is counted and read once, and reports carry its lr."""
    model, optimizer, batch, step_fn = origins.build("where_sqrt")
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, on="raise", capture=False) as w:
        for step in range(origins.BUG_STEP + 2):
            step_fn(*batch(step))
            assert (w.step_count, w.reads) == (step + 1, step + 1)
    report = info.value.report
    assert (report.step, report.module, report.op) == (origins.BUG_STEP, *[origins.EXPECTED["where_sqrt"][i]
                                                                          for i in (0, 2)])
    assert report.lr == [optimizer.param_groups[0]["lr"]]


def test_a_done_listener_is_called_once_backward_has_filled_the_gradients():
    from tensor_dap.triggers.loss_tap import listen

    original = torch.autograd.backward
    w = torch.ones(3, requires_grad=True)
    seen = []
    stops = [listen(lambda loss: seen.append(("done", w.grad is None)), done=True),
             listen(lambda loss: seen.append(("before", w.grad is None)))]
    try:
        (w * 2).sum().backward()
        torch.autograd.backward([(w * 3).sum()], [torch.ones(())])  # an explicit gradient: not a loss
    finally:
        for stop in stops:
            stop()
    assert seen == [("before", True), ("done", False)]
    assert torch.autograd.backward is original


@pytest.mark.parametrize("bug", ["masked_softmax", "where_sqrt"])
def test_micro_batches_accumulated_by_hand_are_steps_of_their_own(bug):
    """4 micro-batches per update by hand: each backward() is checked as it returns, so the third micro-batch of
    update 1 (backward 6) is the step named, with the birthplace the accumulated optimizer loop gets."""
    model, _, batch, _ = origins.build(bug)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, on="raise", capture=False):
        for update in range(3):
            for i in range(MICRO):
                _, loss = model(*batch(update * MICRO + i - 2))  # micro-batch 6 is origins' BUG_STEP
                (loss / MICRO).backward()
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-1e-2)
            model.zero_grad()
    report = info.value.report
    module, phase, op = origins.EXPECTED[bug]
    assert (report.step, report.module, report.phase, report.op) == (1 * MICRO + 2, module, phase, op)
    assert report.source["line"] == origins.birth_line(bug)


@pytest.mark.parametrize("how", ["optimizer", "by hand", "rerun=False", "accumulated"])
def test_a_loss_gone_non_finite_with_finite_gradients_stops_in_its_own_step(how):
    """A squared error that overflows is inf while its gradient, 2 (pred - y), is finite: the unchanged loop checks
    the loss handed to backward() with the step's gradients (pytorch/examples' regression with ``mse_loss``
    trained on an inf loss for 8 steps, until its forward overflowed too)."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3) if how != "by hand" else None
    x = torch.randn(8, 4)
    micro = 2 if how == "accumulated" else 1
    losses = []
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False,
                                                                 rerun=how != "rerun=False"):
        for step in range(5):
            model.zero_grad()
            for _ in range(micro):
                y = torch.full((8, 1), 3e19 if step == 3 else 1.0)  # (pred - y)² overflows float32 at step 3
                loss = F.mse_loss(model(x), y)
                loss.backward()
            assert all(torch.isfinite(p.grad).all() for p in model.parameters())  # only the loss tells
            losses.append(loss.item())
            if optimizer is not None:
                optimizer.step()
            else:
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(p.grad, alpha=-1e-3)
    report = info.value.report
    assert report.step == 3 and report.phase == "loss" and math.isinf(report.loss)
    if how != "rerun=False":  # (which keeps nothing to localize with: the loss's graph is not read)
        assert report.origin.startswith("mse_loss, in the loss computed before test_loop.py:")
    assert report.loss_history[:3] == pytest.approx([micro * v for v in losses[:3]])  # accumulated: the summed loss


def test_a_loss_op_the_graph_cannot_tell_is_said_to_be_not_known():
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        out = model(torch.ones(1, 2))
        loss = (torch.cat([out, out]) * 0 + 3e38).sum()  # a sum that overflows: its node saves nothing to tell by
        loss.backward()
        optimizer.step()
    report = info.value.report
    assert (report.phase, report.op) == ("loss", None)
    assert report.origin.startswith("not known, in the loss computed before test_loop.py:")
    assert "op: not known, in the loss computed before" in to_text(report)


class _SqrtFrom(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 2)

    def forward(self, x, bug=False):
        h = torch.tanh(self.a(x))
        if bug:
            h = torch.where(h > 0, torch.sqrt(h), h)  # the NaN is born in its backward
        return self.b(h)


@pytest.mark.parametrize("given", [True, False], ids=["optimizer given", "optimizer found"])
def test_a_step_function_that_stops_before_the_update_owns_the_update_after_it(given):
    """``w.step(forward_backward)`` and then ``optimizer.step()`` in the loop: the update is that step's, checked
    before it with the step re-runnable, and counted once (it was reported at step 7, unlocalized)."""
    def run(bug_step, watched=True):
        torch.manual_seed(0)
        model = _SqrtFrom()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def forward_backward(x, y, bug):
            loss = F.cross_entropy(model(x, bug), y)
            loss.backward()
            return loss

        watch = tensor_dap.watch(model, optimizer if given else None, on="raise", capture=False) if watched else None
        with watch or contextlib.nullcontext():
            for step in range(5):
                optimizer.zero_grad()
                batch = (torch.randn(8, 4), torch.randint(0, 2, (8,)), step == bug_step)
                watch.step(forward_backward, *batch) if watch else forward_backward(*batch)
                optimizer.step()
        return watch, [p.detach().clone() for p in model.parameters()]

    w, params = run(bug_step=None)
    assert (w.step_count, w.reports) == (5, [])
    assert all(torch.equal(a, b) for a, b in zip(params, run(bug_step=None, watched=False)[1]))
    with pytest.raises(NonFiniteError) as info:
        run(bug_step=3)
    report = info.value.report
    assert (report.step, report.phase, report.op) == (3, "backward", "SqrtBackward0")
    assert report.source["text"].startswith("h = torch.where(h > 0, torch.sqrt(h), h)")


def test_an_evaluation_with_gradients_on_keeps_no_graphs_alive_and_the_next_step_is_localized():
    """Validation that forgot torch.no_grad(): the capture kept every forward's output, so their graphs, until the
    next update (a real run: 3.5x the peak memory). Past MAX_UNUSED forwards with no backward() it holds them
    weakly; the training step after it opens its own capture when its gradients are reset, and is localized."""
    import gc
    import weakref

    from tensor_dap.triggers.loop import MAX_UNUSED

    torch.manual_seed(0)
    model = _SqrtFrom()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    outputs = []
    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for epoch in range(2):
            for i in range(2):
                optimizer.zero_grad()
                F.cross_entropy(model(x, bug=epoch == 1 and i == 1), y).backward()
                optimizer.step()
                if epoch == 1:  # the next step's capture holds none of the evaluation's
                    assert all(ref() is None for ref in outputs)
            if epoch == 0:
                for _ in range(3 * MAX_UNUSED):  # validation, gradients on
                    out = model(x)
                    outputs.append(weakref.ref(out))
                    F.cross_entropy(out, y).item()
                del out
                gc.collect()
                assert all(ref() is None for ref in outputs[:-MAX_UNUSED])  # held by nothing else: freed
    report = info.value.report
    assert (report.step, report.phase, report.op) == (3, "backward", "SqrtBackward0")


def test_an_episode_of_forwards_backpropagated_at_its_end_is_still_replayed():
    """pytorch/examples' actor-critic: the policy runs once per environment step and the episode's loss goes
    backward at its end. The user holds those outputs, so held weakly they still get their gradients, and the
    step re-runs: a NaN born in the model's backward is named."""
    from tensor_dap.triggers.loop import MAX_UNUSED

    torch.manual_seed(0)
    model = _SqrtFrom()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for episode in range(3):
            outs = [model(torch.randn(1, 4), bug=episode == 2) for _ in range(3 * MAX_UNUSED)]
            loss = torch.stack([o.logsumexp(-1).sum() for o in outs]).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (2, "backward", "SqrtBackward0")


def test_a_reinforce_episode_longer_than_the_old_cap_keeping_only_log_probs_is_replayed():
    """pytorch/examples' REINFORCE: one forward per environment step (a CartPole episode runs to 500), the outputs
    dropped once the log-probability is taken. Before, a step of more than 64 forwards was not kept, and outputs held
    weakly lost their gradient when the user dropped them: "found without a re-run", the module holding the
    gradient. Now the node that made each weakened output sees its gradient, and the episode re-runs."""
    torch.manual_seed(0)
    model = _SqrtFrom()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for episode in range(3):
            log_probs = []
            for t in range(150):
                probs = torch.softmax(model(torch.randn(1, 4), bug=episode == 2 and t == 120), dim=-1)
                log_probs.append(torch.distributions.Categorical(probs).log_prob(torch.tensor([0])))
            loss = -torch.cat(log_probs).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (2, "backward", "SqrtBackward0")
    assert report.source["text"].startswith("h = torch.where(h > 0, torch.sqrt(h), h)")
    assert w._loop.dropped is None


def test_an_evaluation_with_gradients_on_drops_the_capture_once_its_inputs_pass_the_budget(monkeypatch):
    """The batches of an evaluation with gradients on would be kept alive by the capture (it keeps each forward's
    inputs to re-run them): past MAX_HELD_BYTES of them it lets the step go and says why in a report."""
    from tensor_dap.triggers import loop

    monkeypatch.setattr(loop, "MAX_HELD_BYTES", 64 << 10)
    torch.manual_seed(0)
    model = _SqrtFrom()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise") as w:
        optimizer.zero_grad()
        for i in range(loop.MAX_UNUSED + 8):  # batches of 16 KiB: the budget passed within the step
            model(torch.randn(1024, 4), bug=i == 0).sum().item()
        assert w._loop.dropped.startswith("the inputs of the forwards with no backward() after them passed")
        model(torch.randn(8, 4), bug=True).sum().backward()
        optimizer.step()
    assert any(note.startswith("no bundle: this step cannot be re-run (the inputs of the forwards with no "
                               "backward()") for note in info.value.report.notes)


def test_the_bytes_held_count_a_namedtuple_s_tensors():
    """A batch of named fields, or an RNN's PackedSequence, holds its tensors one container deep, as a tuple does:
    they count toward MAX_HELD_BYTES (they counted as nothing)."""
    import collections

    from torch.nn.utils.rnn import pack_sequence

    from tensor_dap.triggers.forwards import input_bytes

    Batch = collections.namedtuple("Batch", "x y")
    assert input_bytes((Batch(torch.zeros(256), torch.zeros(64, dtype=torch.int64)),), {}) == 1024 + 512
    packed = pack_sequence([torch.zeros(3, 8), torch.zeros(2, 8)])
    assert input_bytes((packed,), {"lengths": torch.zeros(2)}) == 5 * 8 * 4 + packed.batch_sizes.nbytes + 2 * 4


def test_the_bytes_held_count_a_broadcast_view_by_its_storage_and_a_sparse_batch_by_its_parts():
    """Small tensors are counted by their logical size (the fast path of every RL forward); a large broadcast view
    holds only its storage, and a sparse tensor (which refuses ``nbytes``) its values and indices."""
    from tensor_dap.triggers.forwards import input_bytes

    mask = torch.zeros(1, 512).expand(4096, 512)  # 8 MiB logically, 2 KiB held
    assert input_bytes((mask,), {}) == 512 * 4
    sparse = torch.eye(4).to_sparse()
    assert input_bytes((sparse,), {"x": torch.zeros(3)}) == 4 * 4 + 2 * 4 * 8 + 3 * 4


def test_an_episode_s_nan_advantage_is_charged_to_its_backward_line():
    """actor-critic's returns normalized by a zero std (every return equal): the NaN reaches the outputs of every
    forward of the episode, whose gradients no hook saw arrive: it is named as the value computed outside autograd
    it is (read from the loss's graph), at the step's backward() call."""
    torch.manual_seed(0)
    model = _SqrtFrom()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        outs = [model(torch.randn(1, 4)) for _ in range(20)]
        returns = torch.ones(20)
        advantages = (returns - returns.mean()) / returns.std()  # 0/0
        loss = torch.stack([o.sum() * a for o, a in zip(outs, advantages)]).sum()
        optimizer.zero_grad()
        loss.backward()  # EPISODE-BACKWARD
        optimizer.step()
    report = info.value.report
    assert (report.step, report.phase) == (0, "input")
    assert "computed from them outside autograd (returns normalized by the std of a single value" in report.diagnosis
    assert report.source["line"] == file_marker_line(__file__, "EPISODE-BACKWARD")


def test_a_model_returning_its_loss_puts_one_value_a_step_in_the_history():
    """nanoGPT's model returns each micro-batch's loss and its loop hands ``loss / accumulation`` to backward():
    the report's history holds one value a step, the mean of the micro-batches' losses (what the sum of the
    losses handed to backward() gives a loop computing its loss outside the model), not one a micro-batch."""
    torch.manual_seed(0)
    model = origins.TinyGPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 32, (4, 8))
    pad = torch.ones(4, 8, dtype=torch.bool)  # every key attended to
    micro, bad_step, means = 4, 3, []
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(6):
            raw = []
            for m in range(micro):
                keys = pad.clone()
                if (step, m) == (bad_step, 2):
                    keys[1] = False  # a sample with every key padded: its attention rows are NaN
                _, loss = model(idx.roll(m, 0), keys, idx.roll(m + 1, 1))
                raw.append(loss.item())
                (loss / micro).backward()
            means.append(sum(raw) / micro)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    report = info.value.report
    assert (report.step, report.phase, report.op) == (bad_step, "forward", "softmax")
    history = report.loss_history
    assert len(history) == bad_step + 1 and math.isnan(history[-1])
    assert history[:-1] == pytest.approx(means[:bad_step], rel=1e-6)
    assert report.loss is not None and math.isnan(report.loss)


class _Dynamics(nn.Module):
    """An ODE's right-hand side, as torchdiffeq's ode_demo fits one, with a damping term that takes the sqrt only
    where it is defined... in the forward: torch.where's unused branch gives a NaN gradient where y < 0."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, 16), nn.Tanh(), nn.Linear(16, 2))

    def forward(self, y):
        damping = torch.where(y > 0, torch.sqrt(y), torch.zeros_like(y))  # ODE-SQRT
        return self.net(y ** 3) - 0.01 * damping


def test_a_model_called_on_its_own_outputs_is_blamed_not_the_loss():
    """An Euler solver calls the model on what its last call made: the NaN the last call's backward makes reaches
    every earlier call's outputs. The report named "the gradient the loss sent to the model's outputs" (the first
    call's); the calls whose outputs got finite gradients are re-run first, and one of them made it."""
    torch.manual_seed(0)
    model = _Dynamics()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    y0, target = torch.tensor([[2.0, 0.0]]), torch.tensor([[1.5, 1.0]])
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(3):
            y = y0
            for _ in range(8):  # Euler steps: y goes below 0 in one coordinate
                y = y + 0.1 * model(y)
            loss = (y - target).abs().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (0, "backward", "", "SqrtBackward0"), \
        report.headline
    assert report.source["line"] == file_marker_line(__file__, "ODE-SQRT")


class _Adjoint(torch.autograd.Function):
    """torchdiffeq's ``odeint_adjoint`` in its shape: the forward runs the model with no graph; the backward runs it
    again, step by step back, on a detached state, taking the vector-Jacobian product with respect to the state and
    the parameters: the state's gradient of one step is what the next step back starts from."""

    @staticmethod
    def forward(ctx, model, y, *params):
        ctx.model = model
        ctx.save_for_backward(y)
        return y + 0.1 * model(y)

    @staticmethod
    def backward(ctx, grad):
        params = list(ctx.model.parameters())
        adjoint, total = grad, [torch.zeros_like(p) for p in params]
        for _ in range(2):
            with torch.enable_grad():
                y = ctx.saved_tensors[0].detach().requires_grad_(True)
                out = y + 0.1 * ctx.model(y)
                adjoint, *by_param = torch.autograd.grad(out, (y, *params), adjoint, allow_unused=True)
            total = [t + g if g is not None else t for t, g in zip(total, by_param)]
        return (None, adjoint, *total)


def test_a_model_differentiated_inside_a_custom_backward_with_respect_to_its_input_is_blamed():
    """``odeint_adjoint``: the NaN the sqrt trap makes goes into the gradient of the state, and from there into the
    parameters' at the next step back; a re-run into the parameters alone never made it and blamed the loss. Leaf
    inputs that take a gradient are re-run into too (their own .grad put back)."""
    torch.manual_seed(0)
    model = _Dynamics()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    y0 = torch.tensor([[1.0, -2.0]])
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(2):
            y = _Adjoint.apply(model, y0, *model.parameters())
            optimizer.zero_grad()
            y.pow(2).sum().backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (0, "backward", "SqrtBackward0"), report.headline
    assert report.source["line"] == file_marker_line(__file__, "ODE-SQRT")


def test_a_loss_term_made_between_two_forwards_is_read_from_the_graph():
    """A physics-informed net: the PDE residual (``du / r``) is computed from the interior points' forward before the
    boundary's forward; the graph was read only after the last forward, and the report said "not known". r = 0
    sampled into the interior: ``div`` is named, with its inputs."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(4):
            r = torch.rand(16, 1)
            if step == 2:
                r[0] = 0.0
            r.requires_grad_(True)
            du = torch.autograd.grad(model(r).sum(), r, create_graph=True)[0]
            residual = du / r + 4.0
            loss = residual.pow(2).mean() + model(torch.ones(1, 1)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (2, "loss", "div"), report.headline
    assert "division by zero" in report.diagnosis


class _Sampler(nn.Module):
    """A variational guide as Pyro's AutoNormal is one: it returns its samples by name, a scalar among them."""

    def __init__(self) -> None:
        super().__init__()
        self.loc, self.log_scale = nn.Parameter(torch.zeros(3)), nn.Parameter(torch.zeros(()))

    def forward(self):
        return {"weight": self.loc + torch.randn(3), "sigma": self.log_scale.exp() * torch.rand(())}


@pytest.mark.parametrize("returned", [
    (lambda out: {"sigma": out}, False), (lambda out: {"loss": out}, True), (lambda out: {"train_loss": out}, True),
    (lambda out: (torch.zeros(2), out), True), (lambda out: [torch.zeros(2), 1, out], True)],
    ids=["named-sample", "named-loss", "named-train_loss", "tuple", "list"])
def test_a_scalar_the_model_returns_is_its_loss_unless_named_otherwise(returned):
    """A returned scalar is a loss when nothing names it (nanoGPT's ``(logits, loss)``) or its name says so (HF's
    ``ModelOutput.loss``)."""
    from tensor_dap.triggers.forwards import named_a_loss, named_outputs

    wrap, is_loss = returned
    _, paths = named_outputs(wrap(torch.tensor(1.0)))
    assert named_a_loss(paths[-1] if paths else None) is is_loss


def test_a_guide_returning_its_samples_keeps_the_losses_handed_to_backward_in_the_history():
    """Pyro's AutoNormal returned {"sigma": sample}: the report's history held the samples (0.31, 0.26, ...) where
    the ELBO ran at 60-70."""
    torch.manual_seed(0)
    guide = _Sampler()
    optimizer = torch.optim.SGD(guide.parameters(), lr=0.01)
    handed = []
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(guide, optimizer, on="raise", capture=False):
        for step in range(4):
            samples = guide()
            loss = (samples["weight"] - 1).pow(2).sum() + samples["sigma"] * 100 + 50  # an ELBO-like 50-150
            if step == 3:
                loss = loss * float("nan")
            handed.append(loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    history = info.value.report.loss_history
    assert history[:-1] == pytest.approx(handed[:-1]) and math.isnan(history[-1])


class _Checkpointed(nn.Module):
    """A block re-run in backward by ``torch.utils.checkpoint`` with ``use_reentrant=True`` (HF models'
    ``gradient_checkpointing_enable()``), whose backward refuses ``backward(inputs=...)``."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.emb, self.head = nn.Embedding(32, 16), nn.Linear(16, 32)
        self.block = origins.Block(16, 2, 8, sqrt_act=True)

    def forward(self, idx, pad, shift):
        from torch.utils.checkpoint import checkpoint

        return self.head(checkpoint(self.block, self.emb(idx) + shift, pad, use_reentrant=self.reentrant))


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_checkpointed_model_is_re_run_to_the_op_and_line_that_made_the_nan(reentrant):
    torch.manual_seed(0)
    model = _Checkpointed(reentrant)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, pad = torch.randint(0, 32, (4, 8)), torch.ones(4, 8, dtype=torch.bool)
    shift = torch.zeros(16, requires_grad=True)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(3):
            optimizer.zero_grad()
            F.cross_entropy(model(idx, pad, shift).flatten(0, 1), idx.roll(-1, 1).flatten()).backward()
            optimizer.step()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (0, "backward", "SqrtBackward0"), to_text(report)
    assert report.source["line"] == origins.birth_line("where_sqrt")
    # the MLP whose own code took the sqrt (a reentrant checkpoint re-runs it inside backward(), where ops are not
    # seen one by one: its nodes are told apart by when autograd made them, newer than the MLP's input)
    assert report.module == "block.mlp"


def test_a_re_run_through_a_reentrant_checkpoint_leaves_the_batchs_own_gradient_as_it_was():
    """Back through the whole graph (see above), a re-run would add to the .grad of an input that takes one: it
    is put back; the model's parameters get the step's gradients again."""
    from tensor_dap.state import capture_rng
    from tensor_dap.triggers.forwards import Forward, replay_forwards

    torch.manual_seed(0)
    model = _Checkpointed(reentrant=True)
    model.block.mlp.sqrt_act = False  # a clean step: the re-run runs to its end
    idx, pad = torch.randint(0, 32, (4, 8)), torch.ones(4, 8, dtype=torch.bool)
    shift = torch.zeros(16, requires_grad=True)
    rng = capture_rng()  # (its attention has dropout)
    out = model(idx, pad, shift)
    grad = torch.randn_like(out)
    forward = Forward((idx, pad, shift), {}, rng)
    forward.grads = [grad]
    out.backward(grad)
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    shift.grad = torch.full((16,), 7.0)
    replay_forwards(model, [forward])
    assert torch.equal(shift.grad, torch.full((16,), 7.0))  # the batch's own, untouched
    assert all(torch.equal(p.grad, e) for p, e in zip(model.parameters(), expected))


class _LogOfNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.head = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x):
        return self.head(torch.log(x.abs().sum(1, keepdim=True)) * self.lin(x))  # ACCUMULATED-BIRTH: a zero row


@pytest.mark.parametrize("bad_micro", [1, 3])  # one run outside the step, the last one inside its closure
def test_micro_batches_accumulated_before_a_closure_step_are_re_run_from_the_capture(bad_micro):
    """Lightning's ``accumulate_grad_batches`` runs every micro-batch but the last outside ``optimizer.step(closure)``,
    the last inside it: a NaN from an earlier one is found before the closure adds to it, and re-run from the
    unchanged loop's capture (re-running the closure would not reproduce it); the history keeps one loss a step."""
    torch.manual_seed(0)
    model = _LogOfNorm()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = [torch.randn(8, 4) for _ in range(4)]
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(6):
            micro = [b.clone() for b in batches]
            if step == 4:
                micro[bad_micro][2] = 0.0
            for x in micro[:-1]:
                (model(x).square().mean() / 4).backward()

            def closure(last=micro[-1]):
                loss = model(last).square().mean() / 4
                loss.backward()
                return loss

            optimizer.step(closure)
            optimizer.zero_grad()
    report = info.value.report
    assert (report.step, report.phase, report.op) == (4, "forward", "log"), to_text(report)
    assert report.source["line"] == file_marker_line(__file__, "ACCUMULATED-BIRTH")
    assert len(report.loss_history) == 5  # one value a step (the micro-batches' losses are not piled up)
