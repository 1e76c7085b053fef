"""The one walker over nested containers: order, names, bounds, cycles and hostile containers."""

import collections
import dataclasses
import time

import pytest
import torch

from tensor_dap.nested import first_tensor, holds_tensor, map_tensors, walk


def test_walk_names_read_like_python_in_container_order():
    Pair = collections.namedtuple("Pair", "x y")

    @dataclasses.dataclass
    class Batch:
        ids: torch.Tensor
        meta: dict

    a, b, c, d = (torch.ones(i + 1) for i in range(4))
    value = {"batch": Batch(a, {"mask": b}), "pairs": [Pair(c, 3)], "t": (d,)}
    assert [(path, t is x) for (path, t), x in zip(walk(value, "v"), (a, b, c, d))] == [
        ("v['batch'].ids", True), ("v['batch'].meta['mask']", True), ("v['pairs'][0].x", True), ("v['t'][0]", True)]


def test_dotted_names_read_like_state_dict_keys():
    ckpt = {"model": {"fc.weight": torch.ones(2)}, "hist": [torch.zeros(1)]}
    assert [p for p, _ in walk(ckpt, dotted=True)] == ["model.fc.weight", "hist[0]"]


def test_a_key_that_is_not_plain_is_named_by_type_shape_and_position_on_one_short_line():
    """An optimizer's state is keyed by its parameters: their repr is many lines of numbers."""
    w, b = torch.nn.Parameter(torch.randn(300, 40)), torch.nn.Parameter(torch.randn(40))
    state = {w: {"exp_avg": torch.zeros(300, 40)}, b: {"exp_avg": torch.zeros(40)}}

    class Loud:
        def __repr__(self):
            raise RuntimeError("no repr")

    other = {Loud(): torch.ones(1), ("layer", 3): torch.ones(1), "k" * 100: torch.ones(1), 7: torch.ones(1)}
    assert [p for p, _ in walk(state, "self.state")] == [
        "self.state[<#0 Parameter[300, 40]>]['exp_avg']", "self.state[<#1 Parameter[40]>]['exp_avg']"]
    names = [p for p, _ in walk(other, "x")]
    assert names[:2] == ["x[<#0 Loud>]", "x[('layer', 3)]"] and names[3] == "x[7]"
    assert names[2].startswith("x['kkk") and names[2].endswith("…]") and len(names[2]) == len("x[]") + 40
    assert [p for p, _ in walk({w: torch.ones(1), 3: torch.ones(1)}, dotted=True)] == ["<#0 Parameter[300, 40]>", "3"]


def test_a_self_referencing_list_is_walked_once():
    loop: list = [torch.ones(1)]
    loop.append(loop)
    assert [p for p, _ in walk(loop, "x")] == ["x[0]"]


def test_deep_nesting_needs_no_recursion_and_is_cut():
    deep: list = [torch.ones(1)]
    for _ in range(60):
        deep = [deep]
    assert len(list(walk(deep))) == 1
    for _ in range(100_000):
        deep = [deep]
    start = time.perf_counter()
    assert list(walk(deep)) == []  # past MAX_DEPTH: cut (a recursive walker dies with RecursionError here)
    assert time.perf_counter() - start < 0.5


def test_limit_and_depth_bound_the_work():
    huge = [1] * 10_000_000 + [torch.ones(1)]
    start = time.perf_counter()
    assert list(walk(huge, limit=1000)) == []
    assert time.perf_counter() - start < 0.5  # the list is never materialized into pairs
    assert not holds_tensor(huge)
    assert first_tensor([[[[torch.ones(1)]]]], max_depth=3) is None
    assert first_tensor([[[torch.ones(1)]]], max_depth=3) is not None


def test_keep_unexpanded_yields_leaves_that_are_not_tensors():
    found = list(walk({"a": 1, "b": [torch.ones(1)], "c": "text"}, is_leaf=lambda v: not isinstance(v, (dict, list)),
                      keep_unexpanded=True))
    assert [p for p, _ in found] == ["['a']", "['b'][0]", "['c']"]


def test_a_container_that_raises_is_skipped_not_raised():
    class Hostile(dict):
        def items(self):
            raise RuntimeError("no")

    class HalfBad(list):
        def __iter__(self):
            yield torch.ones(1)
            raise RuntimeError("broken iterator")

    assert list(walk(Hostile(a=torch.ones(1)))) == []
    assert [p for p, _ in walk({"h": HalfBad(), "ok": torch.zeros(1)})] == ["['h'][0]", "['ok']"]


def test_map_tensors_rebuilds_structure_and_namedtuples():
    Pair = collections.namedtuple("Pair", "x y")

    class Odd(Pair):  # a namedtuple whose class is not built from its fields: kept as it is
        def __new__(cls, x):
            return super().__new__(cls, x, 0)

    pair, odd = Pair(torch.ones(1), 2), Odd(torch.ones(1))
    out = map_tensors({"a": [torch.ones(2)], "b": (torch.zeros(1), "s"), "p": pair, "o": odd}, lambda t: t + 1)
    assert out["a"][0].tolist() == [2.0, 2.0] and out["b"][0].tolist() == [1.0] and out["b"][1] == "s"
    assert type(out["p"]) is Pair and out["p"].x.tolist() == [2.0] and out["p"].y == 2
    assert out["o"] is odd


def test_map_tensors_keeps_a_packed_sequence_s_batch_sizes_where_torch_keeps_them():
    """A PackedSequence (an RNN's input) moved field by field: its data and indices go, batch_sizes stay on the CPU
    (torch's RNNs refuse them elsewhere). ``meta`` stands in for an accelerator."""
    from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

    packed = pack_padded_sequence(torch.randn(3, 4, 2), torch.tensor([4, 1, 2]), batch_first=True,
                                  enforce_sorted=False)
    moved = map_tensors({"x": packed}, lambda t: t.to("meta"))["x"]
    assert type(moved) is PackedSequence
    assert moved.data.device.type == moved.sorted_indices.device.type == moved.unsorted_indices.device.type == "meta"
    assert moved.batch_sizes is packed.batch_sizes


def test_map_tensors_refuses_absurd_depth():
    deep: list = [torch.ones(1)]
    for _ in range(200):
        deep = [deep]
    with pytest.raises(ValueError, match="nested more than"):
        map_tensors(deep, lambda t: t)
