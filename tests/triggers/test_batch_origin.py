"""A non-finite batch from a DataLoader: the report names the dataset index of each bad row (the record to fix),
in the main process and with workers, for the batch as the loader gave it or a copy of it (moved to a device)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from torch.utils.data.dataloader import _BaseDataLoaderIter

import tensor_dap
from tensor_dap.errors import NonFiniteError

pytestmark = pytest.mark.timeout(120)

BAD = 137  # the dataset index of the corrupt record


def _data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(256, 8, generator=g), torch.randint(0, 3, (256,), generator=g)
    x[BAD, 2] = float("nan")
    return TensorDataset(x, y)


def _note(loader, copy: bool = False) -> str:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(NonFiniteError) as caught, tensor_dap.watch(model, optimizer, on="raise"):
        for x, y in loader:
            if copy:
                x = x.clone()  # what .to(device) makes: another tensor, the same rows
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
    return " ".join(caught.value.report.notes)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_bad_rows_dataset_index_is_named(workers):
    loader = DataLoader(_data(), batch_size=32, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(1))
    note = _note(loader)
    assert "along dim 0 holds NaN/Inf: " in note and f"the DataLoader's dataset index {BAD})" in note, note


def test_a_copy_of_the_batch_is_told_by_its_rows():
    loader = DataLoader(_data(), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(1))
    assert f"the DataLoader's dataset index {BAD})" in _note(loader, copy=True)


def test_an_iterable_dataset_has_no_indices_to_name():
    class Stream(IterableDataset):
        def __iter__(self):
            data = _data()
            return iter(data[i] for i in range(len(data)))

    note = _note(DataLoader(Stream(), batch_size=32))
    assert "along dim 0 holds NaN/Inf" in note and "dataset index" not in note, note


def test_the_loader_is_given_back_its_own_methods_when_the_last_watch_closes():
    originals = {n: _BaseDataLoaderIter.__dict__[n] for n in ("_next_index", "__next__", "_reset")}
    model = nn.Linear(2, 2)
    with tensor_dap.watch(model), tensor_dap.watch(nn.Linear(2, 2)):
        assert _BaseDataLoaderIter.__dict__["__next__"] is not originals["__next__"]
    assert all(_BaseDataLoaderIter.__dict__[n] is f for n, f in originals.items())


def test_a_wrapper_that_fetches_one_batch_ahead_is_still_named():
    """accelerate's DataLoaderShard hands the loop a batch while the loader has already made the next: the last two
    batches are kept."""
    def ahead(loader):
        it = iter(loader)
        current = next(it)
        for upcoming in it:
            yield current
            current = upcoming
        yield current

    loader = DataLoader(_data(), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(1))
    assert f"the DataLoader's dataset index {BAD})" in _note(ahead(loader))


@pytest.mark.parametrize("workers", [0, 2])
def test_an_iterator_made_before_the_watch_opened_pairs_each_batch_with_its_own_indices(workers):
    """``tensor-dap run`` attaches its watch at the first forward, after the loop made its iterator, whose workers
    were already asked for the indices of the batches in flight: those were never noted, and pairing the oldest
    noted indices with the next batch named another batch's records (or, with no workers, nothing went wrong). Each
    batch is now paired with the indices asked for it, counted from the iterator's start; the ones in flight get
    none. Checked on every batch against the rows themselves (the dataset's row i holds i)."""
    from tensor_dap import batch_origin

    rows = torch.arange(200, dtype=torch.float32)[:, None].repeat(1, 3)
    loader = DataLoader(TensorDataset(rows), batch_size=8, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(2))
    batches = iter(loader)
    next(batches)  # the loop's first batch, before the watch
    handle = batch_origin.follow()
    try:
        named = 0
        for (x,) in batches:
            found = batch_origin.dataset_rows(x, list(range(len(x))), lambda t: list(range(len(t))))
            if found is not None:
                assert found == x[:, 0].long().tolist()
                named += 1
        assert named >= 20  # 24 batches left: all but those in flight when following began
    finally:
        handle.remove()
