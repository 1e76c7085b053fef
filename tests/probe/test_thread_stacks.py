"""Thread stacks and the one line saying where a thread waits, from this process or from a dump."""

import faulthandler
import os
import tempfile
import threading
from pathlib import Path

from tensor_dap.libraries import is_user_file
from tensor_dap.probe.stacks import Frame, ThreadStack, live_stacks, parse_dump, render, where

C10D = os.path.join(os.path.dirname(os.__file__), "site-packages", "torch", "distributed", "distributed_c10d.py")
LOGGER = os.path.join(os.path.dirname(os.__file__), "site-packages", "torch", "distributed", "c10d_logger.py")


def _parked(event):
    event.wait()  # PARKED


PARKED = next(i for i, line in enumerate(Path(__file__).read_text().splitlines(), 1)
              if line.strip() == "event.wait()  # PARKED")


def _with_a_parked_thread(fn):
    event = threading.Event()
    thread = threading.Thread(target=_parked, args=(event,), name="parked", daemon=True)
    thread.start()
    try:
        return fn()
    finally:
        event.set()
        thread.join()


def test_live_stacks_name_threads_and_lines():
    stacks = _with_a_parked_thread(lambda: live_stacks(skip_current=False))
    assert stacks[0].main and stacks[0].name == "MainThread"
    parked = next(s for s in stacks if s.name == "parked")
    assert where(parked) == f"test_thread_stacks.py:{PARKED} in _parked: event.wait()  # PARKED (inside threading.wait)"
    text = render([parked])
    assert text.startswith(f"Thread 'parked': test_thread_stacks.py:{PARKED}")
    assert "Traceback (most recent call last):" in text
    assert "    event.wait()  # PARKED" in text
    assert all(s.name != "MainThread" for s in live_stacks(skip_current=True))  # the caller left out


def test_a_faulthandler_dump_reads_back_the_same():
    def dump():
        with tempfile.TemporaryFile("w+") as f:
            faulthandler.dump_traceback(f, all_threads=True)
            f.seek(0)
            return f.read()

    stacks = parse_dump(_with_a_parked_thread(dump))
    assert stacks[0].main and stacks[0].frames[-1].func == "dump"  # the current (main) thread first
    parked = next(s for s in stacks if any(f.func == "_parked" for f in s.frames))
    assert f"test_thread_stacks.py:{PARKED} in _parked: event.wait()  # PARKED" in where(parked)


def test_a_py_spy_dump_reads_too():
    """py-spy's ``dump`` format (py-spy is not installed here: its documented output stands in)."""
    text = ('Process 4242: python train.py\nPython v3.11.7 (/usr/bin/python3.11)\n\n'
            'Thread 4242 (idle): "MainThread"\n    all_reduce (' + C10D + ':2500)\n'
            '    wrapper (' + LOGGER + ':80)\n    step (/home/me/train.py:88)\n    <module> (/home/me/train.py:120)\n'
            'Thread 4250 (idle): "pin_memory"\n    wait (threading.py:320)\n')
    stacks = parse_dump(text)
    assert [s.name for s in stacks] == ["MainThread", "pin_memory"] and stacks[0].main
    assert [f.func for f in stacks[0].frames] == ["<module>", "step", "wrapper", "all_reduce"]
    assert where(stacks[0]) == "all_reduce (torch.distributed) at train.py:88 in step"


def test_where_names_the_collective_the_user_line_or_the_innermost_frame():
    user = Frame("/home/me/train.py", 88, "step")
    helper = Frame(C10D, 4000, "_new_process_group_helper")
    public = Frame(C10D, 1700, "init_process_group")
    assert where(ThreadStack("main", [user, public, helper])) == \
        "init_process_group (torch.distributed) at train.py:88 in step"
    assert where(ThreadStack("main", [user])) == "train.py:88 in step"
    assert where(ThreadStack("main", [Frame(os.__file__, 10, "f")])).startswith("os.py:10 in f")  # no user frame
    assert where(ThreadStack("idle", [])) == "no Python frames (in native code, or idle)"
    assert not is_user_file(os.__file__) and not is_user_file(C10D) and is_user_file("/home/me/train.py")
