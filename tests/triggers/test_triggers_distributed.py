"""Triggers under torch.distributed: 2 CPU processes (gloo, DistributedDataParallel), rank 1 gets
an Inf in its batch. Reports carry the rank; ``ranks=`` decides who may stop; nobody hangs."""

from __future__ import annotations

import json
import os
import time

import dist_worker
import planted
import pytest
import torch.multiprocessing as mp

pytestmark = pytest.mark.timeout(120)


def run_job(tmp_path, mode):
    init_file = str(tmp_path / "init")
    ctx = mp.spawn(dist_worker.worker, args=(2, init_file, str(tmp_path), mode), nprocs=2, join=False)
    deadline = time.monotonic() + 90
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the distributed job hung")
    return [json.load(open(os.path.join(tmp_path, f"rank{r}.json"))) for r in range(2)]


def test_raise_on_every_rank_with_the_rank_in_each_report(tmp_path):
    ranks = run_job(tmp_path, "raise")
    for r, result in enumerate(ranks):
        report = result["error"]
        assert report is not None, f"rank {r} did not raise"
        assert report["rank"] == r and report["step"] == planted.BUG_STEP
    assert (ranks[1]["error"]["phase"], ranks[1]["error"]["module"]) == ("input", "inp")
    # rank 0's own batch is fine: its report says the NaN came through the all-reduce
    assert ranks[0]["error"]["phase"] == "backward"
    assert any("all-reduce" in n for n in ranks[0]["error"]["notes"])
    assert not any("without a re-run" in n for n in ranks[0]["error"]["notes"])  # (it re-ran: finite alone)


def test_a_batch_job_raises_on_every_rank_under_the_default_mode(tmp_path):
    """``on="auto"`` with no terminal and no debugger anywhere (a batch job, this test's processes): rank 1 used to
    log and go on, as if rank 0 were stopped in a debugger, and then crashed in its next all-reduce ("Connection
    closed by peer") once rank 0 raised; now each rank raises with its own report."""
    ranks = run_job(tmp_path, "auto")
    for r, result in enumerate(ranks):
        assert result["error"] is not None, f"rank {r} did not raise"
        assert result["error"]["rank"] == r and result["error"]["step"] == planted.BUG_STEP
        assert not any("may not stop" in n for n in result["error"]["notes"])


def test_only_allowed_ranks_stop_and_the_others_log_and_continue(tmp_path):
    ranks = run_job(tmp_path, "break")  # default ranks=None: only rank 0 may stop
    assert ranks[0]["stops"] == [planted.BUG_STEP] and ranks[1]["stops"] == []
    for r, result in enumerate(ranks):
        assert result["error"] is None and result["steps"] == 8  # both finished: no deadlock
        assert [rep["rank"] for rep in result["reports"]] == [r]
    assert any("may not stop" in n for n in ranks[1]["reports"][0]["notes"])


def test_an_inplace_error_on_every_rank_is_explained_by_a_local_rerun(tmp_path):
    """Under DistributedDataParallel (with a BatchNorm's buffers to broadcast) both ranks explain their error and
    the job ends. (The re-run runs with DDP's broadcast off, as watch's other re-runs: a rank crashing alone is
    not tested, since its peer then waits in its own next collective whatever the re-run does.)"""
    ranks = run_job(tmp_path, "inplace")
    for result in ranks:
        assert result["steps"] == 2, result
        assert "changed in place by relu (inplace=True) in 3 (ReLU)" in (result["note"] or ""), result
