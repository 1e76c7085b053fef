"""The one-line format, pinned by exact strings."""

import torch

from tensor_dap import describe, summarize
from tensor_dap.format import fmt_bytes, fmt_num


def test_plain_float_line():
    x = torch.tensor([[0.5, -4.0, 3.0, 1.5]] * 4)  # 16 elements: no values, n= and size shown
    assert summarize(x) == "tensor[4, 4] n=16 (64 B) x∈[-4, 3] μ=0.25 σ=2.696"


def test_scalar_int_shows_value():
    assert summarize(torch.tensor(7)) == "tensor[] i64 7"


def test_nonfinite_alarms_and_finite_range():
    x = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert summarize(x) == "tensor[4] x∈[-2, 1] finite μ=-0.5 σ=2.121 NaN!×1 +Inf!×1 [1, nan, inf, -2]"


def test_infinite_values_leave_the_moments_of_the_finite_ones():
    line = summarize(torch.tensor([[1.0, 2.0], [float("inf"), 3.0]] * 4))
    assert line == "tensor[8, 2] n=16 (64 B) x∈[1, 3] finite μ=2 σ=0.8528 +Inf!×4"
    assert summarize(torch.full((20,), float("nan"))) == "tensor[20] n=20 (80 B) NaN!×20"


def test_empty_and_meta():
    assert summarize(torch.empty(0, 3)) == "tensor[0, 3] empty"
    assert summarize(torch.empty(3, 4, device="meta")) == "tensor[3, 4] meta"


def test_parameter_dtype_and_grad_flag():
    p = torch.nn.Parameter(torch.full((256, 784), 2.0, dtype=torch.bfloat16))
    assert summarize(p) == "Parameter[256, 784] bf16 n=200704 (392 KiB) x∈[2, 2] μ=2 σ=0 grad"


def test_integer_ranges_are_exact_whole_numbers():
    """Token ids against a vocabulary: 50256 must not read 5.026e4, the debugger and reports included."""
    ids = torch.tensor([[50256, 3, 17], [0, 12345, 99]] * 4)
    assert summarize(ids) == "tensor[8, 3] i64 n=24 (192 B) x∈[0, 50256] μ=1.05e4 σ=1.88e4"
    s = describe(ids.to(torch.int32))
    assert (s.min, s.max) == (0, 50256) and type(s.max) is int
    big = describe(torch.tensor([2**62 + 1, -3]))  # past 2**53 the pass reads floats: rounded, so not shown as exact
    assert big.min == -3 and type(big.min) is int and type(big.max) is float
    assert type(describe(torch.tensor([0.5, 2.0])).max) is float


def test_all_zeros_and_bool():
    assert summarize(torch.zeros(100)) == "tensor[100] n=100 (400 B) all zeros"
    assert summarize(torch.tensor([True, False, False, True])) == "tensor[4] bool 50% true [True, False, False, True]"


def test_number_formatting():
    assert [fmt_num(v) for v in (4.2137, 0.003, -2.0, 1.23456e7, 1.5e-5, float("-inf"))] == [
        "4.214", "0.003", "-2", "1.23e7", "1.5e-5", "-inf"]
    assert [fmt_bytes(n) for n in (12, 100352, 5 * 2**20)] == ["12 B", "98 KiB", "5.0 MiB"]


def test_sampled_line_says_so():
    from tensor_dap import Budget

    x = torch.arange(1000, dtype=torch.float32)
    s = describe(x, budget=Budget(exact_elements=100, scan_elements=500, chunk_elements=10, max_ms=None))
    assert s.sampled and not s.range_exact
    assert "x≈[" in str(s) and "μ≈" in str(s)


def _half_nan_half_inf_cut_short():
    from tensor_dap import Budget

    x = torch.full((10_000,), float("nan"))
    x[::2] = float("inf")
    return describe(x, budget=Budget(exact_elements=None, scan_elements=None, chunk_elements=100, max_ms=0))


def test_debugger_stats_line_marks_estimated_counts():
    """When the time cap cuts the pass short, counts are estimates from what was read, and say so."""
    from tensor_dap.dap.values import stats_line

    s = _half_nan_half_inf_cut_short()
    assert not s.counts_exact and s.sampled and not s.range_exact
    assert "NaN=≈5000 +Inf=≈5000 -Inf=≈0" in stats_line(s)
    assert "NaN!×≈5000 +Inf!×≈5000" in str(s)
    assert "NaN=0 +Inf=1 -Inf=0" in stats_line(describe(torch.tensor([1.0, float("inf")])))


def test_rich_table_agrees_on_estimated_counts():
    """The pdb table agrees with the debugger's stats line: estimated counts carry their ≈."""
    import io
    import re

    from tensor_dap.console import make_console
    from tensor_dap.summary.tables import summary_table

    out = io.StringIO()
    make_console(out).print(summary_table(_half_nan_half_inf_cut_short()))
    rows = dict(re.findall(r"^(NaN|\+Inf|-Inf)\s+(\S+)", out.getvalue(), flags=re.M))
    assert rows == {"NaN": "≈5000", "+Inf": "≈5000", "-Inf": "≈0"}


def test_grad_fn_is_the_op_past_module_hooks():
    """A full backward hook (the user's, or tensor_dap's while it localizes a NaN) puts a pass-through node after
    a module's outputs: the summary names the op that made each output, nested modules and several outputs too."""
    class Pair(torch.nn.Module):
        def forward(self, x):
            return torch.cat([x * 2, x + 1]), x.sin()

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pair = Pair()

        def forward(self, x):
            return self.pair(x)

    outer = Outer()
    for m in (outer, outer.pair):
        m.register_full_backward_hook(lambda *_: None)
    joined, waved = outer(torch.ones(3, requires_grad=True))
    assert type(joined.grad_fn).__name__ == "BackwardHookFunctionBackward"
    assert (describe(joined).grad_fn, describe(waved).grad_fn) == ("CatBackward0", "SinBackward0")
