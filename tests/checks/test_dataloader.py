"""check_dataloader: a loader slower than the step is a problem, a fast one is not; drawing batches changes nothing."""

import os
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from tensor_dap import check_dataloader

pytestmark = pytest.mark.timeout(120)


class SlowImages(Dataset):
    """Decoding an image on every access: ~10 ms a sample (a sleep: a lower bound, whatever the load)."""

    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.full((3, 4, 4), float(i)), i % 10


def test_slow_loader_against_a_fast_step_is_a_problem_with_advice():
    loader = DataLoader(SlowImages(), batch_size=8, shuffle=True)  # 80 ms a batch, on the main process
    r = check_dataloader(loader, step=lambda batch: batch[0].sum(), batches=3)
    assert r.verdict == "problem"
    slow = r.findings[0]
    assert slow.subject == "num_workers" and "waits for data" in slow.message and "num_workers=" in slow.advice
    assert r.facts["load_s"] >= 0.08 and r.facts["wait_share"] > 0.5 and r.facts["batches_timed"] == 3
    assert r.rows[0][3] == "[[8, 3, 4, 4], [8]]"


def test_fast_loader_against_a_slow_step_is_ok():
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=16)
    r = check_dataloader(loader, step=lambda batch: time.sleep(0.1), batches=3)
    assert r.verdict == "ok", r.findings
    assert r.facts["step_s"] >= 0.1 and r.facts["wait_share"] < 0.2


def test_drawing_batches_leaves_rng_and_the_next_epoch_as_they_were():
    g = torch.Generator().manual_seed(7)
    loader = DataLoader(TensorDataset(torch.arange(40.0)), batch_size=4, shuffle=True, generator=g)
    torch.manual_seed(1)
    expected_rng = torch.get_rng_state()
    expected_epoch = [b[0].tolist() for b in DataLoader(TensorDataset(torch.arange(40.0)), batch_size=4,
                                                        shuffle=True, generator=torch.Generator().manual_seed(7))]
    torch.manual_seed(1)
    r = check_dataloader(loader, batches=3)
    assert r.verdict == "ok" and any("only loading was timed" in f.message for f in r.findings)
    assert torch.equal(torch.get_rng_state(), expected_rng)
    assert [b[0].tolist() for b in loader] == expected_epoch


class Stream(IterableDataset):
    def __iter__(self):  # not split across workers: each worker yields all of it
        return iter(torch.arange(32.0).reshape(-1, 2))


class ShardedStream(Stream):
    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        rows = torch.arange(32.0).reshape(-1, 2)
        return iter(rows[info.id::info.num_workers] if info else rows)


def test_iterable_dataset_replicated_by_workers_is_found():
    r = check_dataloader(DataLoader(Stream(), batch_size=4, num_workers=2), batches=4)
    assert "dataset" in r.subjects and "every worker yields the whole stream" in r.findings[0].message
    fine = check_dataloader(DataLoader(ShardedStream(), batch_size=4, num_workers=2), batches=4)
    assert "dataset" not in fine.subjects


@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # torch warns too, as it should
def test_errors_empty_loaders_and_too_many_workers():
    failing = check_dataloader(DataLoader(SlowImages(), batch_size=2), step=lambda b: 1 / 0, batches=2)
    assert failing.verdict == "problem" and "the step failed: ZeroDivisionError" in failing.findings[0].message
    batches = iter(DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2))
    consumed = check_dataloader(batches)
    assert consumed.verdict == "warning" and "nothing was drawn" in consumed.findings[0].message
    assert len(list(batches)) == 4  # every batch is still there for the training loop
    empty = check_dataloader(DataLoader(TensorDataset(torch.zeros(3, 1)), batch_size=4, drop_last=True))
    assert empty.verdict == "warning" and "no batch" in empty.findings[0].message
    cores = len(os.sched_getaffinity(0))
    crowded = DataLoader(TensorDataset(torch.zeros(8, 1)), batch_size=4, num_workers=cores + 1)
    r = check_dataloader(crowded, batches=1)
    assert any(f.subject == "num_workers" and "CPU cores" in f.message for f in r.findings)
