"""The planted data bugs: a label leaking into a feature, train/test overlap, and the tensor zoo."""

from __future__ import annotations

from typing import Any

from .scenario import Context, Outcome

LEAKED_COLUMN = 4
OVERLAP_ROWS = 40


def tensors(ctx: Context) -> Outcome:
    """Every kind of tensor as one line; the planted NaN/Inf in the logits must stand out."""
    from ..summary import describe
    from ..summary.tables import summaries_table

    rows = [(name, describe(x)) for name, x in zoo()]
    logits = dict(rows)["logits (NaN/Inf planted)"]
    caught = logits.has_nan and logits.has_pos_inf
    return Outcome(caught, [f"logits: {logits}"], [summaries_table(rows, title="tensor_dap.describe()")])


def zoo() -> list[tuple[str, Any]]:
    """Named example tensors, including the ones that signal a bug."""
    import torch

    torch.manual_seed(0)
    layer = torch.nn.Linear(784, 256)
    layer(torch.randn(64, 784)).sum().backward()
    logits = torch.randn(4, 10)
    logits[1, 3] = float("nan")
    logits[2, 0] = float("inf")
    return [
        ("batch", torch.randn(32, 784)),
        ("labels", torch.randint(0, 10, (32,))),
        ("step", torch.tensor(7)),
        ("weight", layer.weight),
        ("weight.grad", layer.weight.grad),
        ("logits (NaN/Inf planted)", logits),
        ("mask", torch.rand(5) > 0.5),
        ("half", torch.randn(3, 4).half()),
        ("transposed", torch.randn(64, 32).t()),
        ("spectrum", torch.fft.rfft(torch.randn(8))),
        ("sparse", torch.eye(5).to_sparse()),
        ("empty", torch.empty(0, 3)),
        ("meta", torch.empty(1024, 1024, device="meta")),
        ("attention mask (broadcast)", torch.ones(32, 1, 1, 2048).expand(32, 16, 2048, 2048)),
        ("big (1e7)", torch.randn(10_000_000)),
    ]


def label_leak(ctx: Context) -> Outcome:
    """Column 4 is the label in disguise (a target encoding computed on the whole data set)."""
    import torch

    from ..checks import check_label_leakage
    from ..checks.render import render

    g = torch.Generator().manual_seed(3)
    labels = torch.randint(0, 3, (2000,), generator=g)
    features = torch.randn(2000, 6, generator=g)
    features[:, LEAKED_COLUMN] = labels.float() * 2.0 + torch.rand(2000, generator=g) * 0.5
    result = check_label_leakage(features, labels)
    caught = any(str(LEAKED_COLUMN) in subject for subject in result.subjects) and len(result.subjects) == 1
    problems = [f"column {f.subject}: {f.message}" for f in result.of_level("problem")]
    return Outcome(caught, [*problems[:1], result.summary], [render(result)])


def overlap(ctx: Context) -> Outcome:
    """40 test rows were copied from the training split (a shuffle after the split, not before)."""
    import torch

    from ..checks import check_leakage
    from ..checks.render import render

    g = torch.Generator().manual_seed(4)
    train = torch.randn(1000, 8, generator=g)
    test = torch.randn(200, 8, generator=g)
    test[:OVERLAP_ROWS] = train[100:100 + OVERLAP_ROWS]
    result = check_leakage(train, test)
    duplicates = _first_number(result.facts, "duplicate")
    caught = result.verdict != "ok" and duplicates == OVERLAP_ROWS
    return Outcome(caught, [result.summary], [render(result)])


def _first_number(facts: Any, word: str) -> Any:
    return next((v for k, v in facts.items() if word in k and isinstance(v, int)), None)
