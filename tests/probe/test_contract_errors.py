"""Errors where a value breaks an op's contract: the crash explanation names the operand that broke it and the usual
fix (binary cross-entropy on scores, a parameter changed in place, a tensor of many values as one truth value)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from crashes import explained

from tensor_dap.probe.shape_errors import classify

pytestmark = pytest.mark.timeout(60)


def _user_hint(ex) -> str:
    frame = ex.frames[-1]
    assert frame.filename == __file__
    return frame.hint


def test_scores_handed_to_bce_name_their_range_and_bce_with_logits():
    criterion = nn.BCELoss()
    logits = torch.linspace(-2.5, 1.5, 8).reshape(8, 1)
    labels = torch.ones(8, 1)
    ex = explained(lambda: criterion(logits, labels))
    assert ex.kind == "probabilities"
    hint = _user_hint(ex)
    assert hint.startswith("`logits` [8, 1] holds -2.5…1.5, not probabilities"), hint
    assert "nn.BCEWithLogitsLoss()" in hint
    assert any(f.hint.startswith("`input` [8, 1] holds -2.5…1.5") for f in ex.frames[:-1])  # torch's own frame


def test_a_nan_handed_to_bce_is_said_to_be_a_nan_not_a_range():
    probs = torch.tensor([0.2, float("nan"), 0.9, float("nan")])
    ex = explained(lambda: F.binary_cross_entropy(probs, torch.ones(4)))
    hint = _user_hint(ex)
    assert hint.startswith("`probs` [4] holds 2 NaN (NaN fails the [0, 1] check)"), hint
    assert "BCEWithLogits" not in hint


def test_targets_outside_zero_one_are_named_as_targets_not_as_scores():
    """torch checks the targets too ("all elements of target ..."): probabilities in range are not blamed, and the
    targets get the targets' fix (class ids belong to cross_entropy), not BCEWithLogits."""
    probs, y = torch.full((3,), 0.5), torch.tensor([2.0, 0.0, 1.0])
    hint = _user_hint(explained(lambda: F.binary_cross_entropy(probs, y)))
    assert hint.startswith("`y` [3] holds 0…2, but binary cross-entropy's targets must be in [0, 1]"), hint
    assert "BCEWithLogits" not in hint and "`probs`" not in hint


def test_a_parameter_initialized_in_place_names_it_and_its_nn_init_call():
    layer = nn.Linear(4, 4)
    ex = explained(lambda: layer.weight.normal_(0, 0.02))
    assert ex.kind == "leaf in place"
    hint = _user_hint(ex)
    assert hint.startswith("`layer.weight` is a leaf that requires grad"), hint
    assert "`with torch.no_grad():`" in hint and "`nn.init.normal_(layer.weight, 0, 0.02)`" in hint


def test_a_leaf_changed_by_an_augmented_assignment_or_an_item_is_named():
    w = torch.zeros(3, requires_grad=True)

    def bump():
        nonlocal w
        w += 1

    assert _user_hint(explained(bump)).startswith("`w` is a leaf that requires grad")
    layer = nn.Linear(2, 2)

    def set_item():
        layer.bias[0] = 0.0  # torch: "a view of a leaf Variable ..."

    ex = explained(set_item)
    assert ex.kind == "leaf in place"
    assert _user_hint(ex).startswith("`layer.bias` is a leaf"), _user_hint(ex)


def test_a_tensor_of_many_values_as_a_condition_names_it_and_its_length():
    scores = torch.tensor([0.5, -1.0, 2.0])

    def decide():
        if scores > 0:
            return 1
        return 0

    ex = explained(decide)
    assert ex.kind == "ambiguous"
    hint = _user_hint(ex)
    assert hint.startswith("`scores > 0` [3] has 3 values"), hint
    assert "`(scores > 0).all()`" in hint and "`(scores > 0).any()`" in hint


def test_a_one_value_operand_of_and_is_not_blamed():
    one, many = torch.tensor(True), torch.tensor([True, False])

    def decide():
        if one and many:
            return 1
        return 0

    hint = _user_hint(explained(decide))
    assert hint.startswith("`many` [2] has 2 values"), hint


def test_the_families_are_told_apart_from_shape_errors():
    assert classify(RuntimeError("all elements of input should be between 0 and 1")) == "probabilities"
    assert classify(RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place "
                                 "operation.")) == "leaf in place"
    assert classify(RuntimeError("Boolean value of Tensor with more than one value is ambiguous")) == "ambiguous"


def test_class_targets_of_two_dims_get_the_fix_for_their_shape():
    """cross_entropy's "multi-target not supported": a column of ids is squeezed, a one-hot matrix becomes ids."""
    scores = torch.randn(6, 4)
    column = torch.randint(0, 4, (6, 1))
    hint = _user_hint(explained(lambda: F.cross_entropy(scores, column)))
    assert hint.endswith("class ids in a column; pass column.squeeze(1) (or .view(-1))"), hint
    one_hot = F.one_hot(torch.randint(0, 4, (6,)), 5)  # five classes where the scores have four: not soft labels
    hint = _user_hint(explained(lambda: F.cross_entropy(scores, one_hot)))
    assert "one-hot targets? pass the class ids, one_hot.argmax(1)" in hint, hint


def test_value_ranges_are_read_chunk_by_chunk_and_bounded():
    """Each chunk is read alone (no temporary of the tensor's size): the result is the whole tensor's; a large
    non-contiguous tensor (its flat copy would be whole) and an accelerator's are not read."""
    from tensor_dap.probe.shape_errors.ranges import CHUNK, value_range

    t = torch.linspace(-3.0, 5.0, 3 * CHUNK + 7)
    t[-1] = float("nan")
    t[5] = -100.0
    assert value_range(t) == (-100.0, pytest.approx(5.0, abs=1e-5), 1)
    low, high, nans = value_range(t, ignore=-100)
    assert low == -3.0 and nans == 1
    ids = torch.full((CHUNK + 3,), -100)
    assert value_range(ids, ignore=-100)[2] == -1  # nothing left once the ignored are out
    assert value_range(torch.zeros(2 * CHUNK, 2).t()) is None
    assert value_range(torch.zeros(4, 4, device="meta")) is None


def test_item_of_many_values_names_the_tensor_and_how_to_reduce_it():
    loss = F.mse_loss(torch.randn(4), torch.randn(4), reduction="none")
    ex = explained(lambda: loss.item())
    assert ex.kind == "one value"
    hint = _user_hint(ex)
    assert hint.startswith("`loss` [4] has 4 values, and .item(), float() and int() take one"), hint
    assert "`loss.mean().item()`" in hint and "`loss.tolist()`" in hint
    assert _user_hint(explained(lambda: float(loss))).startswith("`loss` [4] has 4 values")


class Shrinking(nn.Module):
    """Six 2× poolings: a 32×32 input is 1×1 before the last."""

    def __init__(self):
        super().__init__()
        self.stages = nn.Sequential(*[nn.Sequential(nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1), nn.MaxPool2d(2))
                                      for i in range(6)])

    def forward(self, x):
        return self.stages(x)


def test_a_feature_map_shrunk_below_the_kernel_is_told_where_and_why():
    model, images = Shrinking(), torch.randn(2, 3, 32, 32)
    ex = explained(lambda: model(images))
    assert ex.kind == "too small"
    hints = [f.hint for f in ex.frames]
    assert any(h.startswith("`input` [2, 4, 1, 1] is 1×1 where it reaches the window") for h in hints), hints
    outer = _user_hint(ex)
    # the innermost frame of the program's code: the model's forward, calling its stages
    assert outer.startswith("`x` [2, 3, 32, 32] enters `self.stages` (Sequential) at 32×32, and its downsamplings "
                            "bring it below a kernel"), outer
    assert "nn.AdaptiveAvgPool2d" in outer


def test_the_report_gives_the_hint_in_the_programs_names_once():
    """torch's frame names its parameters (`input`); the program's frame below says the same in its own names, so the
    rendered report shows the hint once, there. Where the program's frame has none, torch's frame's is shown."""
    import io

    from rich.console import Console

    from tensor_dap.debug.views import explanation

    def rendered(ex) -> str:
        console = Console(file=io.StringIO(), width=400, no_color=True)
        console.print(explanation(ex), crop=False)
        return console.file.getvalue()

    criterion, logits = nn.BCELoss(), torch.linspace(-1.0, 2.0, 4)
    text = rendered(explained(lambda: criterion(logits, torch.ones(4))))
    assert text.count("→ ") == 1 and "→ `logits` [4] holds -1…2" in text, text
    ex = explained(lambda: criterion(logits, torch.ones(4)))
    bare = type(ex)(ex.kind, ex.error, tuple(f if f.filename != __file__ else type(f)(**{**f.__dict__, "hint": ""})
                                              for f in ex.frames))
    text = rendered(bare)
    assert text.count("→ ") == 1 and "→ `input` [4] holds" in text, text
