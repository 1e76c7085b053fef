"""check_shapes, check_devices, check_gradients: each on a clean model (no alarm) and with a planted bug (named)."""

import collections
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tensor_dap import check_devices, check_gradients, check_shapes

pytestmark = pytest.mark.timeout(60)


class ConvNet(nn.Module):
    """The classic MNIST net, with the flatten size as a parameter (the classic place to get it wrong)."""

    def __init__(self, flat=320, spare=False):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, 5)
        self.conv2 = nn.Conv2d(10, 20, 5)
        self.bn = nn.BatchNorm2d(20)
        self.drop = nn.Dropout(0.5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        self.flat = flat
        if spare:
            self.aux = nn.Linear(50, 3)  # defined, never used

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.bn(self.conv2(x)), 2))
        x = x.view(-1, self.flat)
        return self.fc2(self.drop(F.relu(self.fc1(x))))


def _state(model):
    return ({k: v.clone() for k, v in model.state_dict().items()}, [m.training for m in model.modules()],
            [None if p.grad is None else p.grad.clone() for p in model.parameters()], torch.get_rng_state())


def _same_state(model, saved):
    tensors, modes, grads, rng = saved
    now = model.state_dict()
    assert all(torch.equal(tensors[k], now[k]) for k in tensors)
    assert [m.training for m in model.modules()] == modes
    assert all((a is None and p.grad is None) or torch.equal(a, p.grad) for a, p in zip(grads, model.parameters()))
    assert torch.equal(rng, torch.get_rng_state())


def test_shapes_clean_model_table_and_state_untouched():
    torch.manual_seed(0)
    model = ConvNet().train()
    model(torch.randn(3, 1, 28, 28)).sum().backward()  # grads present: they must survive the probe
    x = torch.randn(3, 1, 28, 28)
    saved = _state(model)
    r = check_shapes(model, x)
    assert r.verdict == "ok", r.findings
    rows = {row[0]: row for row in r.rows}
    assert rows["(model)"][3] == "[3, 10]" and rows["conv2"][3] == "[3, 20, 8, 8]" and rows["fc1"][2] == "[3, 320]"
    assert rows["fc1"][6] == 320 * 50 + 50 and r.facts["total_params"] == sum(p.numel() for p in model.parameters())
    _same_state(model, saved)


def test_shapes_failure_names_the_line_and_the_mismatch():
    model = ConvNet()
    x = torch.randn(3, 1, 32, 32)  # 32x32 images into a 28x28 net
    saved = _state(model)
    r = check_shapes(model, x)
    assert r.verdict == "problem"
    f = r.findings[0]
    assert f.subject == "(model)" and "after bn" in f.message and "x = x.view(-1, self.flat)" in f.message
    assert "test_model_checks.py" in f.message and "not a multiple of 320" in f.advice
    _same_state(model, saved)


def test_shapes_batch_folding_view_unused_layer_and_float64():
    model = ConvNet(flat=160, spare=True)
    model.fc1 = nn.Linear(160, 50)
    r = check_shapes(model, torch.randn(3, 1, 28, 28))  # view(-1, 160) turns 3 samples into 6 rows
    by_subject = {f.subject: f for f in r.findings}
    assert "from 3 to 6" in by_subject["fc1"].message and by_subject["fc1"].level == "info"  # 6 = 2 × 3
    assert by_subject["aux"].level == "warning" and "never called" in by_subject["aux"].message

    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(4, 6)
            self.b = nn.Linear(9, 2)
            self.pos = nn.Embedding(5, 9)

        def forward(self, x):
            h = self.a(x).reshape(-1, 9)  # [3, 5, 6] -> [10, 9]: 3 samples become 10 rows, mixed
            return self.b(h) + self.pos(torch.arange(5)).sum()  # a fresh index tensor is not the batch

    odd = check_shapes(Odd(), torch.randn(3, 5, 4))
    warn = [f for f in odd.findings if f.level == "warning"]
    assert [f.subject for f in warn] == ["b"] and "from 3 to 10" in warn[0].message

    class Upcast(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = Scale()
            self.out = nn.Linear(4, 1).double()

        def forward(self, x):
            return self.out(self.scale(x))

    up = check_shapes(Upcast(), torch.randn(2, 4))
    assert [f.subject for f in up.findings if f.level == "warning"] == ["scale"]
    assert check_shapes(nn.Linear(4, 1).double(), torch.randn(2, 4).double()).verdict == "ok"  # f64 by choice


class Scale(nn.Module):
    def forward(self, x):
        return x * torch.full((1,), 2.0, dtype=torch.float64)  # a 1-d double promotes the result


def test_shapes_meta_device_kwargs_and_odd_inputs():
    with torch.device("meta"):  # 400 MB of weights that never exist
        big = nn.Sequential(nn.Embedding(50_000, 1024), nn.Linear(1024, 50_000))
    r = check_shapes(big, torch.zeros(2, 16, dtype=torch.long, device="meta"))
    assert r.verdict == "ok" and r.rows[0][3] == "[2, 16, 50000]" and r.rows[0][5] == "meta"

    class Keyed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, input_ids, mask=None):
            return self.fc(input_ids * mask)

    kw = check_shapes(Keyed(), {"input_ids": torch.ones(4, 3), "mask": torch.ones(4, 3)})
    assert kw.verdict == "ok" and "mask=[4, 3]" in kw.rows[0][2]
    assert check_shapes(nn.LazyLinear(3), torch.zeros(2, 4)).verdict == "problem"  # would materialize: refused
    assert check_shapes(nn.Linear(3, 2), torch.zeros(3)).verdict == "ok"  # unbatched: no batch to follow
    assert check_shapes(nn.Linear(3, 2), torch.zeros(0, 3)).verdict == "ok"  # an empty batch
    assert check_shapes("not a model", 1).findings[0].message == "expected an nn.Module"


def test_devices_clean_and_meta_simulated_gpu():
    model = ConvNet()
    clean = check_devices(model, torch.randn(2, 1, 28, 28), labels=torch.zeros(2, dtype=torch.long))
    assert clean.verdict == "ok" and clean.facts["home"] == "cpu" and clean.facts["inputs"] == 2

    model.fc2.to("meta")  # the demo's stand-in for a layer left on another device
    r = check_devices(model, {"x": torch.randn(2, 1, 28, 28)})
    assert r.verdict == "problem" and r.subjects == ("fc2",)
    assert "weight, bias on meta" in r.findings[0].message and "cpu" in r.findings[0].message
    devices = {(row[0], row[1]): row[2] for row in r.rows}
    assert devices[("meta", "parameter")] == 2 and devices[("cpu", "input")] == 1


def test_devices_inputs_elsewhere_dtype_and_empty_inputs():
    model = nn.Linear(4, 2).to("meta")
    r = check_devices(model, torch.zeros(3, 4), batch={"mask": torch.ones(3, 4, device="meta"),
                                                       "x64": torch.zeros(3, 4, dtype=torch.float64, device="meta")},
                      note="no tensors here")
    by = {f.subject: f for f in r.findings}
    assert by["input[0]"].level == "problem" and "input on cpu, model on meta" in by["input[0]"].message
    assert "batch['mask']" not in by
    assert by["batch['x64']"].level == "warning" and "f64" in by["batch['x64']"].message
    assert by["note"].level == "warning" and "holds no tensor" in by["note"].message


class PackedClassifier(nn.Module):
    """An RNN over a packed batch, its lengths on the CPU as pack_padded_sequence wants them."""

    def __init__(self):
        super().__init__()
        self.rnn, self.head = nn.LSTM(4, 6, batch_first=True), nn.Linear(6, 3)

    def forward(self, packed, lengths):
        out, _ = nn.utils.rnn.pad_packed_sequence(self.rnn(packed)[0], batch_first=True)
        return self.head(out.sum(1) / lengths[:, None].to(out))


def _packed(lengths):
    from torch.nn.utils.rnn import pack_padded_sequence

    return pack_padded_sequence(torch.randn(len(lengths), max(lengths), 4), torch.tensor(lengths), batch_first=True,
                                enforce_sorted=False)


def test_shapes_of_a_packed_sequence_one_argument_by_what_it_packs():
    """A PackedSequence is a namedtuple: passed alone it is the one argument (it was spread into four, and the
    check failed on a model that works), and it reads by what it packs."""
    packed, lengths = _packed([3, 5, 2]), torch.tensor([3, 5, 2])
    alone = check_shapes(nn.LSTM(4, 6), packed)
    assert alone.verdict == "ok", alone.findings
    assert alone.rows[0][2] == "PackedSequence[10, 4] 3 seqs ≤5 steps"
    assert alone.rows[0][3].startswith("(PackedSequence[10, 6] 3 seqs ≤5 steps, ([1, 3, 6], [1, 3, 6]))")
    both = check_shapes(PackedClassifier(), (packed, lengths))
    assert both.verdict == "ok" and both.rows[0][2] == "PackedSequence[10, 4] 3 seqs ≤5 steps, [3]"
    Batch = collections.namedtuple("Batch", "x y")  # a batch of the program's own class: one argument, by field
    named = check_shapes(nn.Identity(), Batch(torch.ones(2, 3), torch.zeros(2)))
    assert named.verdict == "ok" and named.rows[0][2] == "Batch(x=[2, 3], y=[2])"


class _SparseConv(nn.Module):  # pytorch/examples' GCN layer
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(5, 3)

    def forward(self, x, adj):
        return torch.spmm(adj, self.lin(x))


def test_shapes_and_devices_name_a_sparse_argument_and_count_what_it_holds():
    """A GCN's adjacency matrix is sparse: the table says so, and its bytes are its values and indices (the
    devices check counted its dense size, 32 MB for this one)."""
    adj = (torch.eye(2000) + torch.diag(torch.ones(1999), 1)).to_sparse()
    shapes = check_shapes(_SparseConv(), (torch.randn(2000, 5), adj))
    assert shapes.verdict == "ok" and shapes.rows[0][2] == "[2000, 5], [2000, 2000] sparse_coo", shapes.rows
    devices = check_devices(_SparseConv(), torch.randn(2000, 5), adj)
    inputs = next(r for r in devices.rows if r[1] == "input")
    assert inputs[3] == 2000 * 5 * 4 + 3999 * (4 + 2 * 8), devices.rows
    jagged = torch.nested.nested_tensor([torch.randn(2, 5), torch.randn(4, 5)], layout=torch.jagged)
    sequences = check_shapes(nn.Linear(5, 3), jagged)  # a ragged dim reads '?', as the summaries say
    assert sequences.verdict == "ok" and sequences.rows[0][2:4] == ("[2, ?, 5] jagged", "[2, ?, 3] jagged"), \
        sequences.rows


def test_devices_a_packed_sequence_s_batch_sizes_and_an_rnn_s_lengths_stay_on_the_cpu():
    """torch keeps a PackedSequence's batch_sizes on the CPU, and pack_padded_sequence wants lengths there: not
    problems on a model elsewhere (``meta`` stands in for a GPU); lengths are a warning, as labels look the same."""
    model = PackedClassifier().to("meta")
    packed, lengths = _packed([3, 5, 2]).to("meta"), torch.tensor([3, 5, 2])
    assert packed.batch_sizes.device.type == "cpu"
    r = check_devices(model, packed, lengths=lengths)
    by = {f.subject: f for f in r.findings}
    assert r.verdict == "warning" and set(by) == {"lengths"}, r.findings
    assert "pack_padded_sequence" in by["lengths"].advice
    plain = check_devices(nn.Linear(4, 2).to("meta"), torch.zeros(3, 4), labels=torch.zeros(3, dtype=torch.long))
    assert {f.subject: f.level for f in plain.findings} == {"input[0]": "problem", "labels": "problem"}  # no RNN


def test_devices_model_parallel_across_same_kind_is_only_a_warning():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    model = nn.Sequential(nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 4).to("cuda:1"))
    r = check_devices(model)
    assert r.verdict == "warning"


def _trained(model, x):
    model.zero_grad()
    model(x).pow(2).mean().backward()
    return model


def test_gradients_clean_model_no_alarm():
    torch.manual_seed(0)
    model = _trained(ConvNet(), torch.randn(4, 1, 28, 28))
    before = [p.grad.clone() for p in model.parameters()]
    r = check_gradients(model)
    assert r.verdict == "ok", r.findings
    assert r.facts["total_norm"] == pytest.approx(torch.linalg.vector_norm(torch.stack(
        [p.grad.norm() for p in model.parameters()])).item(), rel=1e-5)
    assert all(torch.equal(a, p.grad) for a, p in zip(before, model.parameters()))


def test_gradients_planted_nan_exploding_zero_and_unused_branch():
    torch.manual_seed(0)
    model = _trained(ConvNet(spare=True), torch.randn(4, 1, 28, 28))
    model.fc1.weight.grad[0, 0] = float("nan")
    model.conv1.weight.grad.mul_(1e6)
    model.fc2.weight.grad.zero_()
    r = check_gradients(model)
    by = {f.subject: f for f in r.findings}
    assert by["fc1.weight"].level == "problem" and "not finite" in by["fc1.weight"].message
    assert by["conv1.weight"].level == "warning" and "above 1000" in by["conv1.weight"].message
    assert "exactly zero" in by["fc2.weight"].message
    assert "aux" in by and "2 trainable parameters (weight, bias) received no gradient" in by["aux"].message
    assert r.verdict == "problem" and r.to_dict()["facts"]["total_norm"] == "nan"


def test_gradients_detached_branch_and_no_backward_yet():
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(4, 4)
            self.head = nn.Linear(4, 1)
            self.aux = nn.Linear(4, 1)

        def forward(self, x):
            h = self.body(x)
            return self.head(h) + self.aux(h).detach()  # the aux head trains nothing

    model = TwoHeads()
    assert check_gradients(copy.deepcopy(model)).findings[0].subject == "(model)"  # before backward()
    _trained(model, torch.randn(5, 4))
    r = check_gradients(model)
    assert r.subjects == ("aux",) and r.verdict == "warning"
    model.aux.requires_grad_(False)  # frozen on purpose: fine
    assert check_gradients(model).verdict == "ok" and check_gradients(model).facts["frozen"] == 2


def test_shapes_clean_transformer_no_false_alarms():
    """Seen on real models (nanoGPT, pytorch/examples): position ids built in forward are not the batch, and
    nn.MultiheadAttention uses out_proj's weights without calling it."""

    class TinyGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(50, 16)
            self.pos = nn.Embedding(32, 16)
            self.attn = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
            self.head = nn.Linear(16, 50)

        def forward(self, idx):
            t = idx.shape[1]
            positions = torch.arange(t)  # [T]: fresh, not derived from the batch
            return self.head(self.attn(self.tok(idx) + self.pos(positions)))

    for batch in (1, 2, 4, 8):
        r = check_shapes(TinyGPT(), torch.randint(0, 50, (batch, 8)))
        assert r.verdict == "ok" and not r.findings, (batch, r.findings)


class ListedBlocks(nn.Module):
    """Blocks kept in a plain list (and a dict of heads): torch registers neither."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.blocks = [nn.Linear(8, 8) for _ in range(2)]
        self.heads = {"a": nn.Linear(8, 2)}
        self.sizes = [8, 8]  # a plain list of numbers: not layers

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.heads["a"](x)


def test_layers_in_a_plain_list_or_dict_are_named_by_both_model_checks():
    model = ListedBlocks()
    model(torch.randn(2, 4)).sum().backward()
    found = {f.subject: f for f in check_gradients(model).findings}
    assert set(found) >= {"ListedBlocks.blocks", "ListedBlocks.heads"} and "ListedBlocks.sizes" not in found
    assert found["ListedBlocks.blocks"].level == "warning"
    assert found["ListedBlocks.blocks"].message.startswith("a plain Python list holding 4 parameters: "
                                                           "model.parameters() (so the optimizer)")
    assert "nn.ModuleList" in found["ListedBlocks.blocks"].advice
    assert found["ListedBlocks.heads"].message.startswith("a plain Python dict holding 2 parameters")

    moved = ListedBlocks().to("meta")  # .to() moves the registered layers only
    result = check_devices(moved, torch.randn(2, 4, device="meta"))
    finding = next(f for f in result.findings if f.subject == "ListedBlocks.blocks")
    assert finding.level == "problem" and "on cpu while the model is on meta (.to() does not move them)" in \
        finding.message
    assert result.verdict == "problem"


def test_registered_containers_are_not_named():
    model = nn.Sequential(nn.Linear(4, 8), nn.ModuleList([nn.Linear(8, 8)]), nn.ModuleDict({"a": nn.Linear(8, 2)}),
                          nn.LSTM(8, 8))  # an RNN keeps its registered weights in a list of its own too
    model.aliases = list(model[1])  # a plain list of layers registered elsewhere: nothing left out
    model[0](torch.randn(2, 4)).sum().backward()
    assert not any("plain Python" in f.message for f in check_gradients(model).findings)
    assert not any("plain Python" in f.message for f in check_devices(model, torch.randn(2, 4)).findings)


def test_a_huge_plain_list_on_the_model_is_read_up_to_its_budget():
    from tensor_dap.probe import unregistered

    model = ListedBlocks()
    model.samples = list(range(5_000_000))  # a dataset kept on the model: numbers, not layers
    model.more = [nn.Linear(2, 2) for _ in range(unregistered.ITEMS + 5)]
    found = {g.holder: g for g in unregistered.unregistered(model)}
    assert "ListedBlocks.samples" not in found
    assert len(found["ListedBlocks.more"].params) == 2 * unregistered.ITEMS  # the first ITEMS layers' only
