"""A real Jupyter kernel (ipykernel) driven as a notebook page drives it, for the tests of stops in notebooks.

Why: a notebook answers ``input()`` (and so pdb's prompt) through the page, over the kernel's stdin channel, only
for a cell run with ``allow_stdin``; that is what decides whether tensor_dap may stop there, so the tests run cells
in a kernel process over ZeroMQ, as JupyterLab or VS Code would, and type the replies a person would. JupyterLab's
visual debugger speaks the Debug Adapter Protocol to the kernel's own debugpy over the control channel
(``debug_request``/``debug_reply``, events as ``debug_event`` on iopub): ``debug`` and ``debug_event`` send and read
those messages as the page does.
"""

from __future__ import annotations

import os
import queue
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from jupyter_client import KernelManager

_COLOURS = re.compile(r"\x1b\[[0-9;]*m")

# A notebook's training cell under a watch, with a NaN planted in step 3's batch (the stops' tests run it).
TRAIN = """
import torch, torch.nn as nn, torch.nn.functional as F
import tensor_dap
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with tensor_dap.watch(model, opt):
    for step in range(5):
        x = torch.randn(16, 4)
        if step == 3:
            x[0, 0] = float("nan")  # the planted bug: a NaN in the batch
        loss = F.mse_loss(model(x), torch.zeros(16, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
print("trained to step", step)
"""


@dataclass
class Cell:
    """What running one cell showed: its printed text (streams and results, in order), the prompts the page was
    asked to answer, and the error it ended with (its name and message, and its traceback), if any."""

    text: str = ""
    prompts: list[str] = field(default_factory=list)
    error: tuple[str, str] | None = None
    traceback: str = ""  # the error's, as the page shows it (colours taken out)


class Kernel:
    def __init__(self, manager: KernelManager) -> None:
        self._manager = manager
        self._client = manager.client()
        self._client.start_channels()
        self._client.wait_for_ready(timeout=120)

    def run(self, code: str, replies: Sequence[str] = (), *, allow_stdin: bool = True, timeout: float = 120) -> Cell:
        """Run ``code`` as a cell; each input request gets the next of ``replies`` ("c" once they run out)."""
        client, cell, left = self._client, Cell(), list(replies)
        msg_id = client.execute(code, allow_stdin=allow_stdin)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                request = client.stdin_channel.get_msg(timeout=0.02)
                if request["msg_type"] == "input_request":
                    cell.prompts.append(request["content"]["prompt"])
                    client.input(left.pop(0) if left else "c")
            except queue.Empty:
                pass
            try:
                msg = client.iopub_channel.get_msg(timeout=0.02)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                cell.text += content["text"]
            elif kind in ("execute_result", "display_data"):
                cell.text += str(content["data"].get("text/plain", "")) + "\n"
            elif kind == "error":
                cell.error = (content["ename"], content["evalue"])
                cell.traceback = _COLOURS.sub("", "\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return cell
        raise TimeoutError(f"the cell did not finish in {timeout} s; so far: {cell}")


    def debug(self, command: str, arguments: dict | None = None, timeout: float = 60) -> dict:
        """A DAP request to the kernel's debugger, as JupyterLab sends it; the response's content."""
        client = self._client
        self._seq = getattr(self, "_seq", 0) + 1
        request = client.session.msg("debug_request", {"type": "request", "seq": self._seq, "command": command,
                                                        "arguments": arguments or {}})
        client.control_channel.send(request)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                reply = client.control_channel.get_msg(timeout=0.1)
            except queue.Empty:
                continue
            if reply["parent_header"].get("msg_id") == request["header"]["msg_id"]:
                return reply["content"]
        raise TimeoutError(f"no reply to the debugger's {command!r} in {timeout} s")

    def debug_event(self, name: str, timeout: float = 60) -> dict:
        """The next DAP event ``name`` the kernel's debugger sends (other iopub messages are passed over)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                msg = self._client.iopub_channel.get_msg(timeout=0.1)
            except queue.Empty:
                continue
            if msg["msg_type"] == "debug_event" and msg["content"].get("event") == name:
                return msg["content"]
        raise TimeoutError(f"no {name!r} event from the kernel's debugger in {timeout} s")

    def execute(self, code: str) -> str:
        """Start running ``code`` as a cell without waiting for it (a breakpoint may stop it); its message id."""
        return self._client.execute(code)


@contextmanager
def kernel(env: dict[str, str] | None = None, cwd: str | None = None) -> Iterator[Kernel]:
    """A kernel of this interpreter (its own process, in ``cwd``), shut down on the way out."""
    manager = KernelManager()
    manager.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    manager.start_kernel(env={**os.environ, **(env or {})}, **({"cwd": cwd} if cwd else {}))
    running = None
    try:
        running = Kernel(manager)
        yield running
    finally:
        if running is not None:
            running._client.stop_channels()
        manager.shutdown_kernel(now=True)
