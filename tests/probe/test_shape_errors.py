"""Shape-error explanations: the operands of the failing line and their shapes, evaluated safely."""

import pytest
import torch
from torch import nn
from zoo import CountingTorchFunction

from crashes import explained

from tensor_dap.probe.shape_errors import classify, explain

pytestmark = pytest.mark.timeout(60)


def _ops(frame):
    return {o.expr: o.shape for o in frame.operands if o.kind == "tensor"}


def test_matmul_names_operands_and_inner_dims():
    x, w = torch.randn(4, 3), torch.randn(4, 5)

    def step():
        h = x * 2
        return h @ w

    ex = explained(step)
    assert ex.kind == "matmul"
    frame = ex.frames[0]
    assert frame.source == "return h @ w" and frame.function == "step"
    assert _ops(frame) == {"h": (4, 3), "w": (4, 5)}
    assert "h has 3 columns" in frame.hint and "w has 4 rows" in frame.hint


def test_broadcast_with_computed_operand():
    x = torch.randn(4, 3)
    ex = explained(lambda: x + torch.ones(4, 4) * 2)
    assert ex.kind == "broadcast"
    assert _ops(ex.frames[0]) == {"x": (4, 3), "torch.ones(4, 4) * 2": (4, 4)}
    assert "dim -1 is 3 vs 4" in ex.frames[0].hint


def test_module_call_explained_in_library_frame_and_user_frame():
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU())
    x = torch.randn(2, 3)
    ex = explained(lambda: model(x))
    inner, outer = ex.frames
    assert inner.filename.endswith("linear.py")
    assert _ops(inner) == {"input": (2, 3), "self.weight": (5, 4), "self.bias": (5,)}
    assert "input's last dim is 3" in inner.hint
    assert outer.filename == __file__ and _ops(outer) == {"x": (2, 3)}
    assert any(o.kind == "module" and o.expr == "model" for o in outer.operands)


def test_linear_module_hint_and_cat_operands():
    fc = nn.Linear(4, 5)
    x, w = torch.randn(2, 3), torch.randn(2, 5)
    ex = explained(lambda: fc(x.view(2, 3)))
    assert "fc expects in_features=4" in ex.frames[-1].hint
    ex = explained(lambda: torch.cat([x, w.t()], dim=0))
    assert ex.kind == "size mismatch" and _ops(ex.frames[0]) == {"x": (2, 3), "w.t()": (5, 2)}


def test_inplace_broadcast_hint():
    def step():
        a = torch.zeros(3)
        a += torch.ones(4, 3)

    ex = explained(step)
    assert "cannot change a's shape [3]" in ex.frames[0].hint


def test_reevaluation_runs_no_forward_and_allocates_nothing():
    calls = []

    class Counting(nn.Module):
        def forward(self, x):
            calls.append(1)
            return x

    model = Counting()
    w = torch.randn(7, 5)

    def step():
        # torch.randn(10**6, 10**6) would need 4 TB: it is only ever evaluated on the meta device
        return model(torch.ones(2, 3)) @ w + torch.randn(10**6, 10**6).sum()

    ex = explained(step)
    assert calls == [1]  # the original call only
    frame = ex.frames[0]
    assert frame.expr == "model(torch.ones(2, 3)) @ w"
    assert _ops(frame) == {"w": (7, 5)}  # the module's output is not recomputed
    assert [o.kind for o in frame.operands] == ["unknown", "tensor"]


def test_not_a_shape_error():
    assert classify(KeyError("x")) is None
    assert classify(RuntimeError("CUDA out of memory")) is None
    try:
        raise ValueError("bad learning rate")
    except ValueError as exc:
        assert explain(exc) is None


def test_load_state_dict_size_mismatch_lists_the_differing_tensors():
    old = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    checkpoint = old.state_dict()
    ex = explained(lambda: model.load_state_dict(checkpoint))
    assert ex.kind == "size mismatch"
    hint = ex.frames[-1].hint
    assert "3 of 4 tensors differ" in hint
    assert "0.weight: checkpoint [8, 4] vs model [16, 4]" in hint
    assert "2.weight: checkpoint [3, 8] vs model [3, 16]" in hint
    assert "2.bias" not in hint
    module = next(o for o in ex.frames[-1].operands if o.kind == "module")
    assert module.detail == "Sequential(3) (131 parameters)"  # not an empty-looking "Sequential()"


def test_view_hints_count_elements_and_contiguity():
    q = torch.randn(2, 5, 12)
    ex = explained(lambda: q.view(2, 5, 4, 12 // 4 + 1))
    assert ex.kind == "size mismatch"
    assert ex.frames[0].hint == "q [2, 5, 12] has 120 elements, but view(2, 5, 4, 4) needs 160"
    ex = explained(lambda: q.reshape(-1, 7))
    assert "120 elements" in ex.frames[0].hint and "not a multiple of 7" in ex.frames[0].hint
    ex = explained(lambda: q.transpose(1, 2).view(2, -1))
    assert ex.kind == "not contiguous"  # the sizes fit: the layout does not (was called a size mismatch)
    assert "not contiguous" in ex.frames[0].hint and ".reshape(" in ex.frames[0].hint


def test_wrong_number_of_dims_names_the_operand_and_the_expected_dims():
    conv = nn.Conv2d(3, 8, 3)
    image = torch.randn(28, 28)
    ex = explained(lambda: conv(image))
    assert ex.kind == "dims"
    assert "input [28, 28] has 2 dims, but 3-D or 4-D is expected" in ex.frames[0].hint
    assert "channels" not in ex.frames[-1].hint  # a 2-D input is not a channel problem
    assert "conv expects a 3-D [C, H, W] or 4-D [N, C, H, W] input, but image [28, 28] has 2 dims" \
        in ex.frames[-1].hint

    # a batch of grey images without its channel dim is read as one image with 16 channels
    grey = nn.Conv2d(1, 8, 3)
    batch = torch.randn(16, 28, 28)
    ex = explained(lambda: grey(batch))
    hint = ex.frames[-1].hint
    assert "grey expects in_channels=1, but batch [16, 28, 28] has 16 channels" in hint
    assert "one unbatched sample" in hint and "batch.unsqueeze(1)" in hint

    bn = nn.BatchNorm2d(8)
    ex = explained(lambda: bn(batch))
    assert ex.kind == "dims" and "batch [16, 28, 28] has 3 dims, but 4-D is expected" in ex.frames[-1].hint

    logits, target = torch.randn(32, 10), torch.randint(0, 10, (32, 1))
    ex = explained(lambda: nn.functional.cross_entropy(logits, target))
    assert ex.kind == "dims" and "target [32, 1] has 2 dims, but 0-D or 1-D is expected" in ex.frames[-1].hint

    ex = explained(lambda: batch.transpose(1, 3))
    assert "batch [16, 28, 28] has 3 dims (valid dims are -3..2), but dim 3 was asked for" in ex.frames[0].hint


def test_broadcast_inside_a_method_call_compares_the_operands():
    scores = torch.randn(2, 4, 10, 10)
    mask = torch.ones(2, 12)
    ex = explained(lambda: scores.masked_fill(mask[:, None, None, :] == 0, float("-inf")))
    frame = ex.frames[0]
    assert _ops(frame) == {"scores": (2, 4, 10, 10), "mask[:, None, None, :] == 0": (2, 1, 1, 12)}
    assert not [o for o in frame.operands if o.kind == "unknown"]  # float('-inf') is just a number
    assert "dim -1 is 10 vs 12" in frame.hint


# ---------------------------------------------------------------------------- nothing runs twice


def test_optimizer_step_in_the_failing_line_is_not_run_again():
    model = nn.Linear(3, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = []
    opt.register_step_pre_hook(lambda *a: steps.append(1))
    model(torch.randn(2, 3)).sum().backward()
    a, b = torch.randn(2, 3), torch.randn(4, 5)

    exc = _catch(lambda: (opt.step(), a @ b))
    assert len(steps) == 1  # the real run
    before = [p.detach().clone() for p in model.parameters()]
    ex = explain(exc)
    assert len(steps) == 1 and _ops(ex.frames[0]) == {"a": (2, 3), "b": (4, 5)}
    assert all(torch.equal(p, q) for p, q in zip(before, model.parameters()))  # explain changed nothing


def _catch(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the point is to catch what the user's code raises
        return exc
    raise AssertionError("no exception")


def test_properties_methods_and_getattr_are_never_evaluated():
    class Source:
        def __init__(self):
            self.batches = [torch.randn(4, 7) for _ in range(3)]
            self.calls = 0

        @property
        def batch(self):  # consumes a batch on every read
            return self.batches.pop()

        def scaled(self, t):
            self.calls += 1
            return t * 2

        def __getattr__(self, name):
            self.calls += 1
            return torch.randn(4, 7)

    class Slotted:
        __slots__ = ("w",)

        def __init__(self):
            self.w = torch.randn(4, 3)

    src, holder, x = Source(), Slotted(), torch.randn(2, 5)
    ex = explained(lambda: x @ src.batch)
    assert len(src.batches) == 2  # the one real read
    frame = ex.frames[0]
    assert _ops(frame) == {"x": (2, 5)} and any(o.kind == "unknown" and o.expr == "src.batch" for o in frame.operands)
    ex = explained(lambda: src.scaled(x) @ src.dynamic)
    assert src.calls == 2 and not _ops(ex.frames[0])  # one call each by the real run, none by explain
    ex = explained(lambda: x @ holder.w)  # a slot is plain data
    assert _ops(ex.frames[0]) == {"x": (2, 5), "holder.w": (4, 3)}
    assert "x has 5 columns" in ex.frames[0].hint


def test_subclass_torch_function_never_runs_while_explaining():
    x = torch.randn(4, 3).as_subclass(CountingTorchFunction)
    w = torch.randn(4, 5)
    exc = _catch(lambda: torch.nn.functional.linear(x.transpose(0, 1).mT, w.T))
    CountingTorchFunction.calls = 0
    ex = explain(exc)
    assert CountingTorchFunction.calls == 0
    assert _ops(ex.frames[0]) == {"x.transpose(0, 1).mT": (4, 3), "w.T": (5, 4)}


def test_a_patch_size_that_does_not_divide_the_image_is_named():
    """lucidrains' ViT cuts patches with einops: a 30x30 image and 8x8 patches fail inside einops' own code."""
    from einops.layers.torch import Rearrange

    to_patches = Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=8, p2=8)
    img = torch.randn(2, 3, 30, 30)
    ex = explained(lambda: to_patches(img))
    assert ex.kind == "size mismatch"
    assert any("splits an axis of length 30 into groups of 8, and 30 is not a multiple of 8" in f.hint
               and "pad it to 32, or use a size that divides 30 (2, 3, 5, 6, 10, 15)" in f.hint for f in ex.frames), \
        [f.hint for f in ex.frames]
    from tensor_dap.probe.shape_errors.hints import _chunks_hint  # an axis of 10**15 + 37: no divisor below
    # 10,000, and no search up to it

    huge = _chunks_hint(f"can't divide axis of length {10**15 + 37} in chunks of 8")
    assert huge.endswith(f"pad it to {10**15 + 40}"), huge


def test_layer_norm_on_the_wrong_width():
    norm = nn.LayerNorm(64)
    x = torch.randn(4, 8, 32)
    ex = explained(lambda: norm(x))
    assert ex.kind == "size mismatch"
    assert any(_ops(f).get("x") == (4, 8, 32) for f in ex.frames)
    assert any("ends in [32], but the norm normalizes over [64]" in f.hint for f in ex.frames)


def test_batch_norm_on_a_batch_of_one_names_the_input_and_the_short_last_batch():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.BatchNorm1d(8)

        def forward(self, features):
            return self.norm(features)

    head = Head().train()
    last = torch.randn(1, 8)  # an epoch's last batch: 641 samples in batches of 64
    ex = explained(lambda: head(last))
    assert ex.kind == "batch of one"
    user = next(f for f in ex.frames if f.function == "forward" and f.filename == __file__)
    assert _ops(user) == {"features": (1, 8)}
    assert user.hint.startswith("features [1, 8] is a batch of one") and "drop_last=True" in user.hint
    head.eval()
    assert head(last).shape == (1, 8)  # the advice holds: eval mode uses the running statistics


def test_instance_norm_on_a_one_by_one_map_says_the_input_shrank():
    norm = nn.InstanceNorm2d(3)
    tiny = torch.randn(2, 3, 1, 1)
    ex = explained(lambda: norm(tiny))
    assert ex.kind == "batch of one"
    assert any("tiny [2, 3, 1, 1] has a 1×1 feature map" in f.hint for f in ex.frames)


def test_conditional_operands_take_the_branch_a_plain_flag_picks_and_never_call_bool():
    class Flag:
        calls = 0

        def __bool__(self):
            Flag.calls += 1
            return True

    x, wide, narrow = torch.randn(2, 3), torch.randn(2, 5), torch.randn(3, 5)
    training, scale = False, None
    ex = explained(lambda: torch.cat([x, wide if training or scale else narrow]))
    assert _ops(ex.frames[0]) == {"x": (2, 3), "wide if training or scale else narrow": (3, 5)}
    flag, mask = Flag(), torch.ones(())
    exc = _catch(lambda: torch.cat([x, wide if flag else narrow, narrow if mask else wide]))
    Flag.calls = 0
    ex = explain(exc)
    assert Flag.calls == 0  # the user's __bool__ is the user's code; a tensor's reads its data
    unknown = [o.expr for o in ex.frames[0].operands if o.kind == "unknown"]
    assert unknown == ["wide if flag else narrow", "narrow if mask else wide"]


def test_a_class_past_the_scores_names_the_targets_range_and_the_number_of_classes():
    """cross_entropy's "Target 3 is out of bounds" names the value only; the hint says the targets' range (its
    ignore_index left out) against the scores' classes."""
    import torch.nn.functional as F

    scores, target = torch.randn(6, 3), torch.tensor([0, 1, 2, 3, -100, 0])
    ex = explained(lambda: F.cross_entropy(scores, target))
    assert ex.kind == "out of range"
    inner = ex.frames[0]
    assert inner.hint.startswith("`target` holds classes 0–3 but `input` scores 3 classes (0–2)"), inner.hint
    assert "labels numbered from 1?" in inner.hint


def test_an_id_past_an_embedding_names_the_ids_range_and_the_tables_rows():
    emb = nn.Embedding(20, 8)
    tokens = torch.tensor([[0, 5, 24], [3, 19, 1]])
    ex = explained(lambda: emb(tokens))
    assert ex.kind == "out of range"
    outer = ex.frames[-1]
    assert outer.filename == __file__
    assert outer.hint.startswith("`tokens` holds ids 0–24 but `emb` is an Embedding of 20 rows (ids 0–19)"), outer.hint
    assert any(f.hint.startswith("`input` holds ids 0–24 but `weight` has 20 rows") for f in ex.frames[:-1])


def test_ids_not_readable_or_too_many_give_no_range():
    """Ids off the CPU (after a device-side assert nothing is readable; meta stands in) or past the read bound are
    not read: no range is made up, and the crash report's cost stays bounded."""
    from tensor_dap.probe.shape_errors.ranges import MAX_READ, _bounds

    assert _bounds(torch.zeros(2, 3, dtype=torch.long, device="meta")) is None
    assert _bounds(torch.zeros(1, dtype=torch.long).expand(MAX_READ + 1)) is None  # (a view: nothing allocated)
    assert _bounds(torch.tensor([-100, 4, 2])) == (2, 4)  # cross_entropy's ignore_index left out
    assert _bounds(torch.tensor([-100])) is None


def test_operands_on_two_devices_are_named_with_their_devices():
    """torch names two devices, not which operand is where: the hint does, a module by its parameters' devices.
    (meta stands in for a GPU here: the same error family, from torch's device check.)"""
    model = nn.Linear(4, 2)
    x = torch.randn(3, 4, device="meta")
    ex = explained(lambda: model(x))
    assert ex.kind == "devices"
    outer = ex.frames[-1]
    assert outer.filename == __file__
    assert outer.hint.startswith("`x` is on meta but `model`'s parameters are on cpu: put the model and each batch "
                                 "on one device"), outer.hint
    assert classify(RuntimeError("Expected all tensors to be on the same device, but found at least two devices, "
                                 "cuda:0 and cpu!")) == "devices"


def test_a_float64_batch_into_a_float32_model_names_which_operand_has_which_dtype():
    """numpy's float64 reaching a float32 Linear: "mat1 and mat2 must have the same dtype" is a dtype error, not a
    matmul shape error, and the hint names each side."""
    import numpy as np

    model = nn.Linear(4, 2)
    x = torch.from_numpy(np.ones((3, 4)))
    ex = explained(lambda: model(x))
    assert ex.kind == "dtypes"
    assert ex.frames[-1].hint.startswith("`x` is float64 but `model`'s parameters are float32: make them one dtype "
                                         "(a numpy array is float64"), ex.frames[-1].hint


@pytest.mark.parametrize("layer", ["conv", "batchnorm"])
def test_a_float64_batch_into_a_conv_or_a_norm_is_a_dtype_error_with_its_operands(layer):
    """A conv says "Input type (double) and bias type (float) should be the same", a CPU batch norm "mixed dtype
    (CPU)": both are dtype errors, named by the module's parameters' dtype."""
    import numpy as np

    model = nn.Conv2d(3, 4, 3) if layer == "conv" else nn.BatchNorm1d(4)
    x = torch.from_numpy(np.ones((2, 3, 8, 8) if layer == "conv" else (2, 4)))
    ex = explained(lambda: model(x))
    assert ex.kind == "dtypes", ex.error
    assert ex.frames[-1].hint.startswith("`x` is float64 but `model`'s parameters are float32"), ex.frames[-1].hint


def test_a_convs_input_and_weight_on_two_devices_is_a_device_error():
    """torch names a conv's devices by tensor type (no GPU here: the message is classified as CUDA writes it)."""
    cuda = ("Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) should be the same or input "
            "should be a MKLDNN tensor and weight is a dense tensor")
    assert classify(RuntimeError(cuda)) == "devices"
    assert classify(RuntimeError("Input type (c10::Half) and bias type (float) should be the same")) == "dtypes"


@pytest.mark.parametrize("call, said", [
    ("cross_entropy", "`target` is float32, but class indices must be integers (`target.long()`)"),
    ("embedding", "`ids` is float32, but an Embedding's ids must be integers (`ids.long()`)"),
])
def test_float_ids_and_class_targets_are_said_to_need_integers(call, said):
    import torch.nn.functional as F

    scores, target, table, ids = torch.randn(4, 3), torch.tensor([0.0, 1.0, 2.0, 1.0]), nn.Embedding(5, 2), \
        torch.tensor([1.0, 2.0])
    ex = explained((lambda: F.cross_entropy(scores, target)) if call == "cross_entropy" else (lambda: table(ids)))
    assert ex.kind == "dtypes"
    assert any(f.hint.startswith(said) for f in ex.frames), [f.hint for f in ex.frames]


def test_scores_and_targets_of_different_batch_sizes_point_at_the_flatten():
    """A flatten that halves the features per row doubles the rows: cross_entropy then names two batch sizes."""
    import torch.nn.functional as F

    h, y = torch.randn(8, 4, 13, 13), torch.zeros(8, dtype=torch.long)
    head = nn.Linear(338, 10)
    ex = explained(lambda: F.cross_entropy(head(h.view(-1, 338)), y))
    assert ex.kind == "batch size"
    assert ex.frames[-1].hint.startswith("the scores have 16 rows but the targets 8: the batch dim changed"), ex.frames
    assert "x.flatten(1)" in ex.frames[-1].hint


class Flattening(nn.Module):
    """A classifier sized for 28×28 inputs: its view(-1, n) turns a batch of larger images into more rows."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(1, 6, 5), nn.Linear(6 * 12 * 12, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv(x)), 2)
        x = x.view(-1, 6 * 12 * 12)  # FLATTEN
        return self.fc(x)


def test_the_models_flattening_line_is_named_when_the_batch_size_changed():
    """The forward has returned when the loss fails: the model the failing frame holds has its forward read as source
    (never run) for a view(-1, n); a model without one is not blamed."""
    import torch.nn.functional as F
    from markers import file_marker_line

    model, images, labels = Flattening(), torch.randn(8, 1, 40, 40), torch.randint(0, 10, (8,))
    hint = explained(lambda: F.cross_entropy(model(images), labels)).frames[-1].hint
    line = file_marker_line(__file__, "FLATTEN")
    assert (f"`x = x.view(-1, 6 * 12 * 12)` in Flattening.forward (test_shape_errors.py:{line})? Write x.flatten(1)"
            in hint), hint
    plain, rows = nn.Linear(4, 10), torch.randn(16, 4)
    hint = explained(lambda: F.cross_entropy(plain(rows), labels)).frames[-1].hint
    assert "forward (" not in hint and "x.flatten(1)" in hint


def test_backward_on_a_loss_of_many_values_says_its_shape_and_the_reduction_that_made_it():
    import torch.nn.functional as F

    pred = nn.Linear(4, 1)(torch.randn(8, 4))
    loss = F.mse_loss(pred, torch.randn(8, 1), reduction="none")
    ex = explained(lambda: loss.backward())
    assert ex.kind == "not scalar"
    assert ex.frames[-1].hint.startswith("loss [8, 1] is not one number (made by MseLoss with reduction='none'): "
                                         "backward() needs a scalar loss (loss.mean(), or .sum())"), ex.frames
