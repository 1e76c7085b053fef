"""What the unchanged loop's capture costs an RL loop: REINFORCE's episode, one policy forward per environment step
and one backward() and update at the episode's end. Plain vs watch (loop) vs watch with rerun=False, side by side.

Run: .venv/bin/python benchmarks/bench_episode.py [--quick]
The policy is pytorch/examples' (4-128-2 MLP, softmax), the episode 200 steps long with the environment left out
(its states drawn beforehand): the ratio is the policy's own, the least favourable case, since a real environment's
step adds time that the capture does not touch. Every forward past the 8th with no backward() after it is held
weakly, its output's gradient seen by a hook on the node that made it (what makes the episode re-run when a NaN is
born in the policy's backward). Interleaved as bench_guard.py is: a watch's set-up is not timed.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

import torch
from torch import nn

import tensor_dap
from _paired import heap_note, interleaved, round_ratios, spread, steady_heap  # noqa: E402 - the shared timing


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--length", type=int, default=200, help="environment steps per episode")
    args = ap.parse_args()
    steady_heap()
    rounds = args.rounds or (2 if args.quick else 16)
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 128), nn.Dropout(0.6), nn.ReLU(), nn.Linear(128, 2), nn.Softmax(dim=-1))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    states = [torch.randn(1, 4) for _ in range(args.length)]

    def episodes(n: int) -> None:
        for _ in range(n):
            log_probs = []
            for state in states:
                dist = torch.distributions.Categorical(policy(state), validate_args=False)
                log_probs.append(dist.log_prob(dist.sample()))
            returns = torch.linspace(1.0, -1.0, len(log_probs))
            loss = -(torch.cat(log_probs) * returns).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    @contextmanager
    def plain() -> Iterator[Callable[[int], None]]:
        yield episodes

    @contextmanager
    def watched(**options: Any) -> Iterator[Callable[[int], None]]:  # made and closed outside the timer
        with tensor_dap.watch(policy, optimizer, on="raise", capture=False, **options):
            yield episodes

    times = interleaved({"plain": plain, "watch (loop)": watched, "loop, rerun=False": lambda: watched(rerun=False)},
                        rounds, 3, warm=1)
    episode_ms = statistics.median(times["plain"]) * 1e3
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; REINFORCE policy 4-128-2, episodes of "
          f"{args.length} forwards, plain episode {episode_ms:.1f} ms ({episode_ms / args.length * 1e3:.0f} µs a "
          f"step); {heap_note()}")
    print(f"{rounds} rounds × 3 timed episodes per block, variants in a shuffled order each round (a watch's set-up "
          "and one warm-up episode untimed); median episode times, speed × plain, the per-round ratios' middle half")
    for name, values in round_ratios(times).items():
        ratio = statistics.median(times["plain"]) / statistics.median(times[name])
        _, q1, q3 = spread(values)
        extra = (1 / ratio - 1) * episode_ms / args.length * 1e3
        print(f"  {name:<20}{ratio:>8.3f}  middle half {q1:.3f}–{q3:.3f}  (+{extra:.0f} µs a forward)")

if __name__ == "__main__":
    main()
