"""Training triggers in-process: planted bugs, equivalence with per-module hooks, numerics, bundles.

The model, data and bugs live in harness/planted.py (also run as a script by the
debugger tests). Everything here is real: real training loops, real NaNs, real files.
"""

from __future__ import annotations

import os
import random

import pytest
import torch
import planted

import tensor_dap
from tensor_dap import LossThresholdError, NonFiniteError

pytestmark = pytest.mark.timeout(60)

# bug -> (step, phase, module) that the report must name
EXPECTED = {
    "log_zero": (planted.BUG_STEP, "forward", "encoder.layers.1.act"),
    "zero_variance": (planted.BUG_STEP, "forward", "norm"),
    "inf_input": (planted.BUG_STEP, "input", "inp"),
    "backward_nan": (planted.BUG_STEP, "backward", "pre"),
}


def train(bug, steps=12, **watch_kwargs):
    """Train with watch; returns (watch handle, the NonFiniteError raised or None)."""
    return planted.train(bug, steps, **watch_kwargs)


@pytest.mark.parametrize("bug", sorted(EXPECTED))
def test_planted_bug_names_step_phase_and_module(bug, caplog):
    _, exc = train(bug, on="raise")
    assert "step 5" in caplog.text and exc.report.module in caplog.text  # logged as well as raised
    assert exc is not None, "the planted bug was not caught"
    report = exc.report
    assert (report.step, report.phase, report.module) == EXPECTED[bug]
    text = str(exc)  # what a batch job's traceback shows
    assert f"step {report.step}" in text and report.module in text and report.phase in text
    assert any(s.nonfinite for _, _, s in report.tensors), "the report should show the non-finite tensor"
    if bug == "inf_input":  # the sample to look up in the dataset: x[3, 1] = inf
        assert any("1 row of 32 along dim 0 holds NaN/Inf: 3" in note for note in report.notes), report.notes


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_exploding_learning_rate_is_caught_in_the_loss_before_any_module_overflows():
    _, exc = train("exploding_lr", on="raise")
    assert exc is not None
    report = exc.report
    assert report.phase == "loss" and report.module is None
    assert planted.BUG_STEP < report.step < planted.BUG_STEP + 6
    assert report.loss == float("inf")
    # hooks on every module notice the same step, but only in its backward: the loss came first
    assert oracle("exploding_lr", until=report.step)[:2] == (report.step, "backward")


def test_a_loss_finding_stops_with_the_loss_in_the_locals(monkeypatch):
    """Stub of the stop itself (the real stops are in test_triggers_debuggers.py): what it is handed."""
    from tensor_dap.dap import attached
    from tensor_dap.triggers import stop as _trigger_stop

    stops = []
    monkeypatch.setattr(attached, "interactive_terminal", lambda: True)
    monkeypatch.setattr(_trigger_stop, "stop_in_debugger", lambda report, **culprit: stops.append(culprit))
    w, _ = train("exploding_lr", on="break")
    [report] = w.reports
    assert report.phase == "loss" and len(stops) == 1
    assert stops[0]["step"] == report.step and not torch.isfinite(stops[0]["loss"])


def oracle(bug, until=100):
    """The reference: a forward and a full backward hook on every module for the whole run,
    recording the first module (in hook firing order) that sees a non-finite tensor."""
    model, _, batch, step_fn = planted.build(bug)
    seen = []

    def bad(obj):
        return any(isinstance(t, torch.Tensor) and t.is_floating_point() and not torch.isfinite(t).all()
                   for t in (obj if isinstance(obj, tuple) else (obj,)))

    def fwd(name):
        return lambda mod, args, out: seen.append(("forward", name)) if not seen and bad(out) else None

    def bwd(name):
        return lambda mod, gin, gout: seen.append(("backward", name)) if not seen and (bad(gin) or bad(gout)) \
            else None

    for name, mod in model.named_modules():
        mod.register_forward_hook(fwd(name))
        mod.register_full_backward_hook(bwd(name))
    for step in range(until + 1):
        step_fn(*batch(step))
        if seen:
            return (step, *seen[0])
    return None


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("bug", sorted(EXPECTED))
def test_localization_names_the_module_a_hook_on_every_module_names(bug):
    _, exc = train(bug, on="raise")
    expected = oracle(bug)
    assert expected is not None
    step, phase, module = expected
    got_phase = "forward" if exc.report.phase == "input" else exc.report.phase
    assert (exc.report.step, got_phase, exc.report.module) == (step, phase, module)


def run_plain(bug, steps):
    random.seed(0)
    model, _, batch, step_fn = planted.build(bug)
    for step in range(steps):
        step_fn(*batch(step))
    return model


def assert_same_training(a, b):
    for (name, p), q in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(p.nan_to_num(), q.nan_to_num()) and torch.equal(p.isnan(), q.isnan()), name


@pytest.mark.parametrize("bug,on", [("inf_input", "log"), ("backward_nan", "log"), ("log_zero", None)])
def test_numerics_and_rng_stream_are_bit_identical_with_watch_on(bug, on):
    """Same parameters after N steps and the same RNG stream, even when a trigger fired and
    re-ran the step (the model has dropout, so the re-run consumes the RNG)."""
    steps = 9 if on else planted.BUG_STEP  # None: stop before the bug, a clean run
    plain = run_plain(bug, steps)
    plain_draw = (torch.rand(3), random.random())

    random.seed(0)
    model, optimizer, batch, step_fn = planted.build(bug)
    with tensor_dap.watch(model, optimizer, on=on or "raise", capture=False) as w:
        for step in range(steps):
            w.step(step_fn, *batch(step))
    assert len(w.reports) == (1 if on else 0)
    assert_same_training(plain, model)
    watched_draw = (torch.rand(3), random.random())
    assert torch.equal(plain_draw[0], watched_draw[0]) and plain_draw[1] == watched_draw[1]


def test_log_mode_reports_once_while_the_model_stays_non_finite(caplog):
    w, exc = train("inf_input", on="log", steps=10)
    assert exc is None
    assert len(w.reports) == 1 and w.suppressed > 0
    assert "inp" in caplog.text and "step 5" in caplog.text  # the logging record carries the report


def test_sentinel_reads_only_once_every_every_steps(monkeypatch):
    """Values are read back from tensors only on the steps where a read is due, never in between:
    count every Tensor.item/__bool__ call the watch makes, step by step. The CPU stands in for a
    device here (on the CPU itself a value is read when observed: that is no sync)."""
    monkeypatch.setattr("tensor_dap.triggers.sentinel.READ_CPU_NOW", False)
    calls = []
    real_item, real_bool = torch.Tensor.item, torch.Tensor.__bool__
    model, optimizer, batch, step_fn = planted.build("inf_input")
    for every, steps in ((1, 4), (4, 12)):
        w = tensor_dap.watch(model, optimizer, every=every, on="raise", capture=False)
        reading_steps = []
        for step in range(steps):
            calls.clear()
            with monkeypatch.context() as m:
                m.setattr(torch.Tensor, "item", lambda t: calls.append("item") or real_item(t))
                m.setattr(torch.Tensor, "__bool__", lambda t: calls.append("bool") or real_bool(t))
                w.step(step_fn, *batch(step % planted.BUG_STEP))  # clean batches only
            if calls:
                reading_steps.append(step)
            assert "bool" not in calls
        assert reading_steps == list(range(every - 1, steps, every))
        assert w.reads == steps // every
        w.close(flush=False)


def test_sentinel_observe_never_reads_device_values():
    """On the meta device there is nothing to read: observe() working there shows it only launches ops."""
    from tensor_dap.triggers.sentinel import Sentinel

    s = Sentinel(every=4)
    grads = [torch.empty(256, 784, device="meta"), torch.empty(10, device="meta")]
    for step in range(3):
        s.observe([grads], step)
        s.observe_value(torch.empty((), device="meta"), step)
        assert not s.due()
    assert s.reads == 0


def test_every_n_reports_the_first_bad_step_even_when_detected_later(monkeypatch):
    """A model too large for a replay window (here: any model) still gets the first bad step."""
    monkeypatch.setattr("tensor_dap.triggers.capture.WINDOW_BYTES", 0)
    _, exc = train("inf_input", on="raise", every=4)
    assert exc is not None
    assert exc.report.step == planted.BUG_STEP
    assert any("every 4 steps" in n and "detected at step 7" in n and "no replay window" in n
               for n in exc.report.notes)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("every", [4, 8])
@pytest.mark.parametrize("bug", sorted(EXPECTED))
def test_every_n_localizes_the_first_bad_step_itself_and_bundles_it(bug, every, tmp_path):
    """Read late, localized exactly: the window's earlier steps are replayed to reach the first bad
    step's own pre-step state, so the report (and the bundle) equal those of every=1."""
    _, exc = train(bug, on="raise", every=every, capture=str(tmp_path))
    assert exc is not None
    report = exc.report
    assert (report.step, report.phase, report.module) == EXPECTED[bug]
    assert any("detected at step 7" in n for n in report.notes)  # the first read after the bug
    state = torch.load(os.path.join(report.bundle, "state.pt"), weights_only=False)
    assert state["step"] == planted.BUG_STEP and report.bundle.endswith(f"-step{planted.BUG_STEP}")
    _, one = train(bug, on="raise", every=1, capture=str(tmp_path / "one"))  # the same pre-step state
    one_state = torch.load(os.path.join(one.report.bundle, "state.pt"), weights_only=False)
    assert_same_training_dict(state["model"], one_state["model"])
    assert_same_training_dict(state["optimizer"]["state"][0], one_state["optimizer"]["state"][0])
    assert torch.equal(state["rng"]["torch"], one_state["rng"]["torch"])


def assert_same_training_dict(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_every_n_failure_found_by_the_last_read_at_close_is_localized_too():
    w, exc = train("zero_variance", on="log", every=4, steps=planted.BUG_STEP + 2)  # no read due after the bug
    assert exc is None and w.step_count == planted.BUG_STEP + 2
    assert [(r.step, r.phase, r.module) for r in w.reports] == [EXPECTED["zero_variance"]]


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("every,start", [(8, 7), (5, 9)])
def test_every_n_replays_learning_rate_changes_made_between_steps(every, start):
    """exploding_lr multiplies lr outside the step function: the replay applies each step's own lr,
    so the first bad step and its module are those that hooks on every module see. The loss
    overflows at step 9: with every=5 that is a read step, and its loss, handed to backward(), is read
    with its own gradients, before the update: that step itself is re-run, no window is replayed."""
    _, exc = train("exploding_lr", on="raise", every=every, steps=16)
    step, _, _ = oracle("exploding_lr", until=exc.report.step)  # module hooks see the same step...
    # ...but the overflow is born in the loss, before any module's backward sees it
    assert (exc.report.step, exc.report.phase, exc.report.module, exc.report.op) == (step, "loss", None, "mse_loss")
    replayed = [n for n in exc.report.notes if "re-run from the state saved" in n]
    if every == 5:
        assert step == start and not replayed and not any("detected at step" in n for n in exc.report.notes)
    else:
        assert any(f"re-run from the state saved at the start of step {start}" in n for n in replayed)


@pytest.mark.parametrize("bug", ["log_zero", "backward_nan"])
def test_every_n_window_replay_keeps_numerics_rng_and_optimizer_objects_identical(bug):
    steps = 12
    plain = run_plain(bug, steps)
    plain_draw = (torch.rand(3), random.random())

    random.seed(0)
    model, optimizer, batch, step_fn = planted.build(bug)
    group, momentum = optimizer.param_groups[0], None
    with tensor_dap.watch(model, optimizer, on="log", every=4, capture=False) as w:
        for step in range(steps):
            w.step(step_fn, *batch(step))
            if step == 3:
                momentum = optimizer.state[model.head.weight]["momentum_buffer"]
    assert [(r.step, r.module) for r in w.reports] == [(planted.BUG_STEP, EXPECTED[bug][2])]
    assert_same_training(plain, model)
    assert optimizer.param_groups[0] is group and optimizer.state[model.head.weight]["momentum_buffer"] is momentum
    watched_draw = (torch.rand(3), random.random())
    assert torch.equal(plain_draw[0], watched_draw[0]) and plain_draw[1] == watched_draw[1]


def test_a_loss_that_overflows_with_finite_gradients_is_caught_and_bundled_in_its_own_step(tmp_path):
    """The loss handed to backward() is checked with the step's gradients, before the update."""
    _, exc = train("exploding_lr", on="raise", capture=str(tmp_path))
    report = exc.report
    assert (report.phase, report.op) == ("loss", "mse_loss")
    bundle_step = torch.load(os.path.join(report.bundle, "state.pt"), weights_only=False)["step"]
    assert bundle_step == report.step and report.bundle.endswith(f"-step{bundle_step}")
    assert not any("detected at step" in n or "the bundle holds step" in n for n in report.notes)
    assert report.loss == float("inf") and report.loss_history[-1] == float("inf")


def test_a_value_returned_after_the_update_is_caught_at_the_next_step_which_says_what_the_bundle_holds(tmp_path):
    """What ``fn`` returns is its loss; one computed after the update (a metric) is only known when ``fn``
    returns: the next step's check finds it, and the report says which step the bundle holds."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step_fn(x, step):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss.detach() / 0 if step == 3 else loss.detach()  # a metric gone wrong, after the update

    with pytest.raises(NonFiniteError) as info, \
            tensor_dap.watch(model, optimizer, on="raise", capture=str(tmp_path)) as w:
        for step in range(6):
            w.step(step_fn, torch.randn(8, 4), step)
    report = info.value.report
    assert (report.step, report.phase) == (3, "loss")
    bundle_step = torch.load(os.path.join(report.bundle, "state.pt"), weights_only=False)["step"]
    assert bundle_step == 4 and any("detected at step 4" in n for n in report.notes)
    assert any("the bundle holds step 4" in n for n in report.notes)


@pytest.mark.parametrize("bug", sorted(EXPECTED))
def test_plain_loop_without_step_names_what_w_step_names(bug):
    """No w.step: the model's forwards are captured from hooks and replayed; same report as w.step mode."""
    model, optimizer, batch, step_fn = planted.build(bug)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for step in range(10):
            step_fn(*batch(step))
    _, exc = train(bug, on="raise")
    got, want = info.value.report, exc.report
    assert (got.step, got.phase, got.module, got.op, got.source) == (want.step, want.phase, want.module, want.op,
                                                                      want.source)


def test_plain_loop_with_rerun_off_still_names_a_module():
    model, optimizer, batch, step_fn = planted.build("backward_nan")
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False,
                                                                   rerun=False):
        for step in range(10):
            step_fn(*batch(step))
    assert info.value.report.step == planted.BUG_STEP
    assert info.value.report.phase == "backward" and info.value.report.module
    assert any("without a re-run" in n for n in info.value.report.notes)


def test_an_internal_failure_never_breaks_the_training_loop(monkeypatch, caplog):
    import sys

    monkeypatch.setattr(sys.modules["tensor_dap.triggers.investigate"], "nonfinite_parameters",
                        lambda model, **kw: 1 / 0)
    w, exc = train("inf_input", on="raise", steps=8)
    assert exc is None and not w.reports
    assert "internal error" in caplog.text and "ZeroDivisionError" in caplog.text


# ------------------------------------------------------------------ break_if

def test_break_if_thresholds_and_return_value():
    assert tensor_dap.break_if(torch.tensor(0.5), above=1.0, on="raise") is False
    with pytest.raises(LossThresholdError, match="above 1"):
        tensor_dap.break_if(torch.tensor(2.0), above=1.0, on="raise", step=7)
    with pytest.raises(LossThresholdError, match="below"):
        tensor_dap.break_if(0.001, below=0.01, on="raise")
    with pytest.raises(NonFiniteError, match="nan"):
        tensor_dap.break_if(torch.tensor(float("nan")), on="raise")
    assert tensor_dap.break_if(torch.tensor(float("nan")), nan=False, on="raise") is False
    assert tensor_dap.break_if(torch.tensor(float("inf")), on="log") is True


def test_break_if_names_the_op_that_made_a_non_finite_loss():
    """A loss that still holds its graph: the op that made Inf/NaN from finite values is read from it (a
    hand-written softplus, log1p(exp(x)), overflowing in exp), at the line that checked the loss."""
    scores = torch.tensor([150.0, -3.0, 2.0], requires_grad=True)
    loss = torch.log1p(torch.exp(scores * 1.0)).mean()
    with pytest.raises(NonFiniteError) as info:
        tensor_dap.break_if(loss, on="raise")  # CHECKED-HERE
    report = info.value.report
    assert (report.op, report.phase, report.module) == ("exp", "loss", None)
    assert report.source["text"].endswith("# CHECKED-HERE") and report.source["file"] == __file__
    assert report.diagnosis.startswith("exp overflowed")
    assert "op: exp, in the loss computed before test_triggers.py:" in str(info.value)
    assert ("op output", "output") in [(sec, name) for sec, name, _ in report.tensors]
    # a non-finite value with no graph to read (or none made by an op from finite values): no op is named
    for loss in (torch.tensor(float("nan")), torch.tensor([float("nan"), 1.0], requires_grad=True).sum()):
        with pytest.raises(NonFiniteError) as info:
            tensor_dap.break_if(loss, on="raise")
        assert info.value.report.op is None


def test_break_if_spike_after_warmup_and_automatic_step():
    fired = []
    for i in range(30):
        loss = torch.tensor(1.0 + 0.01 * (i % 3))
        if i in (3, 25):
            loss = torch.tensor(10.0)  # a spike during warm-up is ignored; after it, it fires
        try:
            tensor_dap.break_if(loss, spike=3.0, on="raise")
        except LossThresholdError as exc:
            fired.append(exc.report.step)
            assert exc.report.kind == "spike" and "running average" in str(exc)
    assert fired == [25]


def test_break_if_raises_under_auto_without_a_terminal(monkeypatch):
    with open(os.devnull) as devnull:
        monkeypatch.setattr("sys.stdin", devnull)
        with pytest.raises(LossThresholdError) as info:
            tensor_dap.break_if(torch.tensor(5.0), above=1.0)
    assert info.value.report.phase == "loss" and info.value.report.rank is None


def test_forced_break_with_nobody_to_stop_for_raises_instead_of_hanging(monkeypatch):
    with open(os.devnull) as devnull:
        monkeypatch.setattr("sys.stdin", devnull)
        with pytest.raises(NonFiniteError, match="no DAP client is attached and stdin is not a terminal"):
            tensor_dap.break_if(torch.tensor(float("nan")), on="break")


def test_bad_arguments_are_clear_errors():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="on='stop'"):
        tensor_dap.watch(model, on="stop")
    with pytest.raises(ValueError, match="every=0"):
        tensor_dap.watch(model, every=0)
    with pytest.raises(ValueError, match="scalar loss"):
        tensor_dap.break_if(torch.ones(3))


def test_steps_drawing_from_python_and_numpy_rngs_stay_identical_and_reproduce():
    """A step that draws from `random` and numpy: the re-run replays the same draws (the report's
    input summary equals the one seen by the original step) and the streams continue unchanged."""
    import numpy as np

    def run(watched):
        random.seed(1)
        np.random.seed(1)
        model, optimizer, batch, step_fn = planted.build("log_zero")
        seen = []
        if not watched:  # record what the culprit op (log of softplus) received in the original step
            model.encoder.layers[1].act.register_forward_hook(
                lambda m, a, o: seen.append(tensor_dap.describe(torch.nn.functional.softplus(a[0]))))

        def noisy_step(x, y):  # random scaling drawn from both host RNGs, inside the step
            return step_fn(x * (1 + random.random()) * (1 + float(np.random.rand())), y)

        w = tensor_dap.watch(model, optimizer, on="log", capture=False) if watched else None
        for step in range(8):
            w.step(noisy_step, *batch(step)) if w else noisy_step(*batch(step))
        draws = (random.random(), float(np.random.rand()))
        if w:
            w.close(flush=False)
        return model, w, draws, seen

    plain, _, plain_draws, seen = run(False)
    watched, w, watched_draws, _ = run(True)
    [report] = w.reports
    assert (report.step, report.phase, report.module) == (planted.BUG_STEP, "forward", "encoder.layers.1.act")
    assert report.op == "log"
    rerun_input = next(s for sec, _, s in report.tensors if sec == "op inputs")
    original_input = seen[planted.BUG_STEP]
    assert (rerun_input.min, rerun_input.max, rerun_input.mean) == (
        original_input.min, original_input.max, original_input.mean)
    assert_same_training(plain, watched)
    assert plain_draws == watched_draws


def test_without_an_optimizer_argument_the_stepping_optimizer_is_found(tmp_path):
    model, _, batch, step_fn = planted.build("zero_variance")
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, on="raise", capture=str(tmp_path)) as w:
        for step in range(10):
            w.step(step_fn, *batch(step))
    report = info.value.report
    assert (report.step, report.phase, report.module) == (planted.BUG_STEP, "forward", "norm")
    state = torch.load(os.path.join(report.bundle, "state.pt"), weights_only=False)
    assert state["optimizer"]["state"]  # the optimizer that stepped, from before the step


def test_a_manual_update_outside_torch_optim_is_not_applied_twice_by_the_rerun():
    def run(watched):
        model, _, batch, _ = planted.build("inf_input")

        def sgd_step(x, y):  # no torch.optim: the check runs after the step
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.05 * p.grad
            return loss

        w = tensor_dap.watch(model, on="log", capture=False) if watched else None
        for step in range(8):
            w.step(sgd_step, *batch(step)) if w else sgd_step(*batch(step))
        if w:
            w.close(flush=False)  # no optimizer given: its hooks are global, never leave them behind
        return model, w

    plain, _ = run(False)
    watched, w = run(True)
    assert [(r.step, r.phase, r.module) for r in w.reports][:1] == [(planted.BUG_STEP, "input", "inp")]
    assert_same_training(plain, watched)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CPU: see the read-count tests)")
def test_cuda_sentinel_makes_no_host_sync_between_reads():
    """With every > 1, steps between reads must not synchronize: CUDA's sync debug mode errors if they do."""
    model, _, batch, _ = planted.build("inf_input")
    model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)  # its state follows the parameters' device

    def cuda_step(x, y):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    w = tensor_dap.watch(model, optimizer, every=4, on="raise", capture=False)
    batches = [tuple(t.cuda() for t in batch(i)) for i in range(4)]
    w.step(cuda_step, *batches[0])  # the first step also probes the host RNGs
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for x, y in batches[1:3]:  # checks 2 and 3 of 4: no read is due
            w.step(cuda_step, x, y)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    w.step(cuda_step, *batches[3])
    assert w.reads == 1
    w.close(flush=False)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.complex64])
def test_sentinel_finds_the_first_bad_step_in_any_dtype_without_overflow_alarms(dtype):
    from tensor_dap.triggers.sentinel import Sentinel, group

    s = Sentinel(every=3)
    big = torch.full((1000,), 60000.0).to(dtype)  # its float16 sum/norm would overflow
    bad = torch.tensor([1.0, float("nan")]).to(dtype)
    s.observe(group([big]), 0)
    s.observe(group([big, bad]), 1)
    s.observe(group([bad]), 2)
    assert s.read() == 1
    s.observe(group([big]), 3)
    assert s.read() is None


def test_cpu_sentinel_gives_gradients_back_bit_for_bit_and_flags_the_bad_step():
    """The CPU check is the GradScaler's in-place one at scale 1: values, NaN payloads and version counters stay."""
    from tensor_dap.triggers.sentinel import Sentinel, group

    weird = torch.tensor([1e38, -0.0, 3.0, float("-inf"), 5e-45])
    weird[2:3].view(torch.int32).fill_(0x7FC01234)  # a NaN with a payload
    grads = [weird, torch.randn(64, 32)[:, ::2], torch.randn(7, dtype=torch.float64)]
    bits = [g.view(torch.int32 if g.dtype == torch.float32 else torch.int64).clone() for g in grads]
    versions = [g._version for g in grads]
    s = Sentinel(every=2)
    s.observe(group(grads[1:]), 0)
    s.observe(group(grads), 1)
    assert s.read() == 1
    assert all(torch.equal(g.view(b.dtype), b) for g, b in zip(grads, bits))
    assert [g._version for g in grads] == versions


def test_cpu_sentinel_checks_gradients_the_fused_check_refuses():
    """An expanded gradient (elements sharing memory, set by hand) is summed instead of written."""
    from tensor_dap.triggers.sentinel import Sentinel, group

    s = Sentinel()
    s.observe(group([torch.tensor(1.0).expand(8)]), 0)
    assert s.read() is None
    s.observe(group([torch.tensor(float("inf")).expand(8), torch.ones(3)]), 1)
    assert s.read() == 1


@pytest.mark.parametrize("read_now", [True, False])
def test_sentinel_reads_gradients_from_parameters_whatever_they_hold(read_now, monkeypatch):
    """observe_params takes gradients straight from the parameters; a missing, sparse or expanded gradient,
    or a complex one, is refused by the fused check and still checked (the careful way)."""
    from tensor_dap.triggers.sentinel import Sentinel, group

    monkeypatch.setattr("tensor_dap.triggers.sentinel.READ_CPU_NOW", read_now)
    nan = float("nan")
    cases = {
        "none": ([None, torch.tensor([1.0, nan])], [None, torch.ones(2)]),
        "sparse": ([torch.tensor([1.0, 0.0, nan, 0.0]).to_sparse()], [torch.eye(2).to_sparse()]),
        "expanded": ([torch.tensor(float("inf")).expand(3), torch.ones(2)], [torch.tensor(1.0).expand(3)]),
        "complex": ([torch.tensor([1j, complex(nan, 0)])], [torch.tensor([1j, 2.0])]),
        "dense": ([torch.ones(3), torch.tensor([float("-inf")])], [torch.ones(3), torch.zeros(1)]),
    }
    for name, (bad, good) in cases.items():
        s = Sentinel(every=2)
        for step, grads in enumerate((good, bad)):
            params = [torch.nn.Parameter(torch.zeros(g.shape if g is not None else (2,), dtype=(
                g.dtype if g is not None else torch.float32))) for g in grads]
            for p, g in zip(params, grads):
                p.grad = g
            s.observe_params(group(params), step)
        assert s.read() == 1, name
        assert s.read() is None, name


def test_sentinel_check_params_on_the_same_groups_every_step():
    """A watch hands check_params the same groups every step: the fused check taken straight from the
    flag must still name a NaN or Inf, a missing gradient (refused, checked the careful way) must not hide
    one, and a clean step after a bad one reads clean."""
    from tensor_dap.triggers.sentinel import Sentinel, group

    params = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))]
    groups = group(params)
    s = Sentinel()
    steps = [[torch.ones(3), torch.ones(2)], [torch.ones(3), torch.tensor([1.0, float("nan")])],
             [torch.ones(3), torch.ones(2)], [None, torch.tensor([float("inf"), 0.0])], [None, torch.ones(2)],
             [torch.ones(3), torch.ones(2)]]
    found = []
    for step, grads in enumerate(steps):
        for p, g in zip(params, grads):
            p.grad = g
        found.append(s.check_params(groups, step))
        if found[-1]:
            assert s.read() == step
    assert found == [False, True, False, True, False, False]
    assert s.reads == 6


@pytest.mark.parametrize("read_now", [True, False])
def test_sentinel_keeps_the_first_bad_step_through_compaction(read_now, monkeypatch):
    """Many unread steps: kept values are summed per step (flags too, when the CPU stands in for a
    device that is not read at once); the first bad step is still named."""
    from tensor_dap.triggers.sentinel import COMPACT_AT, Sentinel, group

    monkeypatch.setattr("tensor_dap.triggers.sentinel.READ_CPU_NOW", read_now)
    s = Sentinel(every=10_000)
    ok = [torch.ones(4), torch.ones(2, dtype=torch.float64)]  # two groups: two flags a step
    for step in range(COMPACT_AT):
        grads = ok if step != 150 else [torch.ones(4), torch.tensor([1.0, float("nan")], dtype=torch.float64)]
        s.observe(group(grads), step)
        s.observe_value(torch.tensor(0.5), step)
    assert s.read() == 150 and s.failing == [150]


class _PoisonGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


class Poison(torch.nn.Module):
    """Turns its forward output, or the gradient it sends back, into NaN at one step."""

    def __init__(self, at_step, phase):
        super().__init__()
        self.at_step, self.phase, self.now = at_step, phase, -1

    def forward(self, x):
        if self.now != self.at_step:
            return x
        if self.phase == "forward":
            return x * float("nan")
        return _PoisonGrad.apply(x)


def random_case(seed):
    """A random MLP with a Poison module at a random depth, poisoning a random phase at a random step."""
    gen = random.Random(seed)
    width = gen.choice([4, 8, 12])
    layers, poison = [], None
    depth = gen.randint(3, 6)
    where = gen.randrange(1, depth)
    for i in range(depth):
        layers.append(torch.nn.Linear(width, width))
        layers.append(gen.choice([torch.nn.Tanh(), torch.nn.ReLU(), torch.nn.Identity()]))
        if i == where:
            poison = Poison(gen.randint(1, 4), gen.choice(["forward", "backward"]))
            layers.append(poison)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = [(torch.randn(8, width), torch.randn(8, 1)) for _ in range(6)]

    def step_fn(x, y, step):
        poison.now = step
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return model, optimizer, data, step_fn


def naive_first(model, data, step_fn):
    seen = []

    def bad(obj):
        return any(isinstance(t, torch.Tensor) and not torch.isfinite(t).all()
                   for t in (obj if isinstance(obj, tuple) else (obj,)))

    for name, mod in model.named_modules():
        mod.register_forward_hook(lambda m, a, o, n=name: seen.append(("forward", n)) if not seen and bad(o)
                                  else None)
        mod.register_full_backward_hook(lambda m, gi, go, n=name: seen.append(("backward", n))
                                        if not seen and (bad(gi) or bad(go)) else None)
    for step, (x, y) in enumerate(data):
        step_fn(x, y, step)
        if seen:
            return (step, *seen[0])
    return None


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("seed", range(8))
def test_localization_equals_hooks_on_every_module_on_random_models(seed):
    model, _, data, step_fn = random_case(seed)
    expected = naive_first(model, data, step_fn)
    model, optimizer, data, step_fn = random_case(seed)
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step, (x, y) in enumerate(data):
            w.step(step_fn, x, y, step)
    report = info.value.report
    assert (report.step, report.phase, report.module) == expected


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_in_place_ops_fall_back_to_tensor_hooks_and_still_localize_the_backward():
    """ReLU(inplace=True) forbids module backward hooks; the re-run falls back to tensor hooks."""
    torch.manual_seed(0)
    poison = Poison(2, "backward")
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU(inplace=True), poison, torch.nn.Linear(6, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step_fn(x, step):
        poison.now = step
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(4):
            w.step(step_fn, torch.randn(5, 6), step)
    report = info.value.report
    assert (report.step, report.phase, report.module, report.op) == (2, "backward", "2", "_PoisonGradBackward")


class _GraphConv(torch.nn.Module):  # pytorch/examples' GCN layer: a sparse adjacency matrix as an argument
    def __init__(self, n_in, n_out, bug=None):
        super().__init__()
        self.kernel, self.bug = torch.nn.Parameter(torch.randn(n_in, n_out) * 0.5), bug

    def forward(self, x, adj):
        support = x @ self.kernel
        if self.bug == "norm":
            support = support / support.norm(dim=1, keepdim=True)  # BUG norm
        elif self.bug == "sqrt":
            support = torch.where(support > 0, torch.sqrt(support), 0)  # BUG sqrt
        return torch.spmm(adj, support)


class _GCN(torch.nn.Module):
    def __init__(self, bug):
        super().__init__()
        self.gc1, self.gc2 = _GraphConv(6, 4), _GraphConv(4, 3, bug)

    def forward(self, x, adj):
        return self.gc2(torch.relu(self.gc1(x, adj)), adj)


@pytest.mark.parametrize("bug", ["norm", "sqrt"])
def test_a_sparse_argument_falls_back_to_tensor_hooks_and_still_names_the_op_and_line(bug):
    """Module backward hooks cannot wrap a sparse argument (torch has no sparse ``view``): the re-run failed and the
    report blamed the module holding a bad gradient. It falls back to tensor hooks, as for in-place ops."""
    import inspect

    from markers import marker_line

    torch.manual_seed(0)
    model = _GCN(bug)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 6)
    x[3] = 0  # a node with no features and no neighbours: a row of zeros in gc2's support
    adj = (torch.eye(8) + torch.diag(torch.tensor([1.0, 1, 0, 0, 1, 1, 1]), 1)).to_sparse()
    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False):
        for _ in range(3):
            optimizer.zero_grad()
            model(x, adj).pow(2).mean().backward()
            optimizer.step()
    report = info.value.report
    assert (report.phase, report.module, report.op) == (("forward", "gc2", "div") if bug == "norm" else
                                                          ("backward", "gc2", "SqrtBackward0")), report
    assert not any("re-running the step failed" in n for n in report.notes), report.notes
    assert report.source is not None and os.path.samefile(report.source["file"], __file__)
    assert report.source["line"] == marker_line(inspect.getsource(inspect.getmodule(_GCN)), f"BUG {bug}")


@pytest.mark.parametrize("give_optimizer", [True, False])
def test_grad_scaler_overflow_skips_and_gradient_accumulation_are_not_alarms(give_optimizer):
    """A GradScaler skipping steps with Inf gradients is normal AMP behaviour, not a trigger."""
    model, optimizer, batch, _ = planted.build("log_zero")
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**126, growth_interval=1)  # overflows often

    def amp_step(x, y, accumulate):
        loss = torch.nn.functional.mse_loss(model(x), y) * 50
        scaler.scale(loss).backward()
        if not accumulate:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        return loss

    with tensor_dap.watch(model, optimizer if give_optimizer else None, on="raise", capture=False) as w:
        for step in range(12):
            w.step(amp_step, *batch(step % planted.BUG_STEP), step % 2 == 0)
    assert scaler.get_scale() < 2.0**126  # the scaler did skip overflowing steps
    assert w.reports == [] and w.reads > 0


def test_public_names_work_even_after_importing_their_modules():
    """Public names stay the functions after every module of the package is imported."""
    import subprocess
    import sys

    code = ("import torch, tensor_dap.triggers.watch, tensor_dap.triggers.replay, tensor_dap\n"
            "w = tensor_dap.watch(torch.nn.Linear(2, 2), capture=False)\n"
            "print(type(w).__name__, callable(tensor_dap.replay))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["watch", "True"]


def test_a_step_that_fails_when_run_again_is_still_reported():
    """A step function that refuses to run twice on the same batch raises in the re-run: the report
    comes without the re-run, saying why, instead of being lost."""
    model, optimizer, batch, step_fn = planted.build("backward_nan")
    consumed = set()

    def once(i):
        if i in consumed:
            raise ValueError(f"batch {i} was already consumed")
        consumed.add(i)
        return step_fn(*batch(i))

    with pytest.raises(NonFiniteError) as info, tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
        for step in range(8):
            w.step(once, step)
    report = info.value.report
    assert report.step == planted.BUG_STEP and report.phase == "backward" and report.module
    assert report.notes[0].startswith("re-running the step failed (ValueError: batch 5 was already consumed)")


@pytest.mark.parametrize("returns", ["the same loss", "another tensor"])
def test_w_step_reads_the_loss_handed_to_backward_once_and_keeps_no_graph(returns, monkeypatch):
    """Inside w.step the loss handed to backward() is checked then; when fn returns that same loss it is not read
    a second time, and a different tensor it returns is. What watch keeps of it is detached: no autograd graph
    held for a step, and no 'requires_grad to a scalar' warning when a report reads the history."""
    import warnings

    from tensor_dap.triggers.sentinel import Sentinel

    seen = []
    observe = Sentinel.observe_value
    monkeypatch.setattr(Sentinel, "observe_value", lambda self, value, step: (seen.append(step),
                                                                             observe(self, value, step))[1])
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        optimizer.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        return loss if returns == "the same loss" else loss.detach().clone()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with tensor_dap.watch(model, optimizer, on="raise", capture=False) as w:
            for _ in range(3):
                w.step(step, torch.randn(8, 4))
            assert w._running_loss[1].grad_fn is None and not w._running_loss[1].requires_grad
            assert len(w._loss_history()) == 3
    assert seen == ([0, 1, 2] if returns == "the same loss" else [0, 0, 1, 1, 2, 2])


def test_a_report_says_when_it_lists_only_the_first_parameters():
    from tensor_dap.triggers.held_now import nonfinite_parameters
    from tensor_dap.triggers.localize import MAX_ROWS

    wide = torch.nn.Module()
    for i in range(MAX_ROWS + 3):
        wide.register_parameter(f"p{i}", torch.nn.Parameter(torch.ones(2)))
    with torch.no_grad():
        wide.p2[0] = float("nan")
    finding = nonfinite_parameters(wide, first_step=True)
    sections = [sec for sec, _, _ in finding.tensors]
    assert sections == [f"parameters (the first {MAX_ROWS} of {MAX_ROWS + 3})"] * MAX_ROWS
    small = torch.nn.Linear(2, 2)
    with torch.no_grad():
        small.bias[0] = float("inf")
    assert {sec for sec, _, _ in nonfinite_parameters(small).tensors} == {"parameters"}


def test_break_if_outside_a_watch_reports_its_lines_losses_and_a_divergence():
    """`tensor-dap run --loss-above` with no watch (pytorch/examples' regression, updating by hand): the report
    still lists the last losses its line saw (8 at most) and says the run diverged."""
    def step(loss):  # one call site for every step, as a training loop has
        return tensor_dap.break_if(torch.tensor(loss), above=1e6, on="raise")

    losses = [5.0 * 2 ** i for i in range(12)]
    with pytest.raises(LossThresholdError) as info:
        for loss in losses + [1e9]:
            step(loss)
    report = info.value.report
    assert report.loss_history == pytest.approx(losses[-7:] + [1e9])
    assert report.diagnosis.startswith("the training diverged: lower the learning rate or clip gradients")
    assert "the loss went from 160 to 1e+09" in report.diagnosis
