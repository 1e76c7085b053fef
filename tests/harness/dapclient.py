"""Minimal Debug Adapter Protocol client used by the tests to drive the *real* debugpy adapter.

Why: the pydevd plugins and renderers in tensor_dap only matter if they behave correctly behind
debugpy's adapter, so tests speak DAP over a 127.0.0.1 socket exactly as an IDE would.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Callable

HOST = "127.0.0.1"


class DapError(RuntimeError):
    """Raised on a failed DAP response, a timeout or a lost connection; `.response` holds the reply."""

    def __init__(self, message: str, response: dict | None = None) -> None:
        super().__init__(message)
        self.response = response


def free_port() -> int:
    """Ask the OS for a free 127.0.0.1 port (tiny reuse race, acceptable for tests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _connect(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None) -> socket.socket:
    """Retry connecting until the listener is up: adapters start listening asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=1.0)
            sock.settimeout(None)
            return sock
        except OSError as exc:
            if proc is not None and proc.poll() is not None:
                raise DapError(f"adapter exited with code {proc.returncode} before accepting") from exc
            if time.monotonic() > deadline:
                raise DapError(f"could not connect to {host}:{port} within {timeout}s: {exc}") from exc
            time.sleep(0.05)


def _read_endpoint(path: str, adapter: subprocess.Popen, timeout: float) -> int:
    """Wait for the adapter's endpoints JSON ({"client": {"host", "port"}}) and return the port."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path) as f:
                return int(json.load(f)["client"]["port"])
        except (OSError, ValueError, KeyError):  # not written (completely) yet
            pass
        if adapter.poll() is not None:
            raise DapError(f"adapter exited with code {adapter.returncode} during startup")
        if time.monotonic() > deadline:
            raise DapError(f"adapter did not report its port within {timeout}s")
        time.sleep(0.02)


class DapClient:
    """One DAP session over a socket; a reader thread collects responses, events and output."""

    def __init__(self, sock: socket.socket, adapter: subprocess.Popen | None = None,
                 timeout: float = 30.0, tmp: tempfile.TemporaryDirectory | None = None) -> None:
        self.timeout = timeout
        self._sock = sock
        self._adapter = adapter
        self._tmp = tmp  # adapter endpoints file and stderr log
        self._closed = False
        self._seq = itertools.count(1)
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._responses: dict[int, dict] = {}
        self._events: list[dict] = []          # not yet consumed by wait_for_event
        self._recent: deque = deque(maxlen=15)  # for diagnostics only
        self._output: list[tuple[str, str]] = []  # (category, text): stdout and stderr arrive through separate pipes
        self._eof = False
        self._terminated_at: float | None = None  # lets waits fail fast once the session ended
        self._start_seq: int | None = None  # pending launch/attach request
        self._children: list[subprocess.Popen] = []  # spawned for runInTerminal
        self.debuggee_pid: int | None = None
        self.stopped_thread: int | None = None
        self._reader = threading.Thread(target=self._read_loop, name="dap-reader", daemon=True)
        self._reader.start()

    # ---------------------------------------------------------------- construction
    @classmethod
    def launch(cls, program: str, args: Sequence[str] = (), env: dict | None = None,
               cwd: str | None = None, python: str = sys.executable, just_my_code: bool = True,
               timeout: float = 30.0, extra: dict | None = None,
               adapter_cmd: Sequence[str] | None = None) -> DapClient:
        """Start a private debugpy adapter and send `launch` (debugpy answers it at configurationDone).

        ``adapter_cmd`` replaces ``[sys.executable, "-m", "debugpy.adapter"]``, e.g. to run the
        adapter by path the way VS Code's Python Debugger runs its bundled copy.

        The adapter binds port 0 and reports it via DEBUGPY_ADAPTER_ENDPOINTS; that file is written only
        once the adapter is fully set up (connecting earlier races its startup: "no attribute 'listener'").
        """
        tmp = tempfile.TemporaryDirectory(prefix="dapclient-")
        endpoints, errpath = os.path.join(tmp.name, "endpoints.json"), os.path.join(tmp.name, "adapter.err")
        with open(errpath, "wb") as errlog:
            adapter = subprocess.Popen(
                [*(adapter_cmd or [sys.executable, "-m", "debugpy.adapter"]), "--host", HOST, "--port", "0"],
                env={**os.environ, "DEBUGPY_ADAPTER_ENDPOINTS": endpoints},
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
                start_new_session=True)  # own group (killable), no controlling tty for the debuggee
        try:
            port = _read_endpoint(endpoints, adapter, timeout)
            sock = _connect(HOST, port, timeout, adapter)
        except DapError as exc:
            _kill_group(adapter.pid, leader=True)
            adapter.wait()
            with open(errpath, "rb") as f:
                err = f.read().decode(errors="replace")[-2000:]
            tmp.cleanup()
            raise DapError(f"{exc}\nadapter stderr:\n{err}") from None
        client = cls(sock, adapter, timeout, tmp)
        config = {"type": "python", "name": "tests", "request": "launch", "program": str(program),
                  "args": [str(a) for a in args], "cwd": str(cwd or os.path.dirname(os.path.abspath(program))),
                  "env": {k: str(v) for k, v in (env or {}).items()}, "python": [python],
                  "console": "internalConsole", "justMyCode": just_my_code, **(extra or {})}
        return client._start("launch", config)

    @classmethod
    def attach(cls, port: int, host: str = HOST, timeout: float = 30.0, just_my_code: bool = True,
               extra: dict | None = None) -> DapClient:
        """Connect to the adapter a `python -m debugpy --listen` debuggee spawned, then `attach`."""
        client = cls(_connect(host, port, timeout), None, timeout)
        config = {"type": "python", "name": "tests", "request": "attach", "justMyCode": just_my_code,
                  "connect": {"host": host, "port": port}, "redirectOutput": True,  # so output_text() works
                  **(extra or {})}
        return client._start("attach", config)

    def _start(self, command: str, config: dict) -> DapClient:
        """initialize, then send launch/attach without waiting: debugpy answers it only after
        configurationDone, and emits `initialized` first to invite breakpoint configuration."""
        try:
            self.request("initialize", {
                "clientID": "tensor_dap-tests", "adapterID": "debugpy", "pathFormat": "path",
                "linesStartAt1": True, "columnsStartAt1": True, "supportsVariableType": True,
                "supportsRunInTerminalRequest": True, "locale": "en-us"})
            self._start_seq = self.send(command, config)
            self._wait(lambda: self._has_event("initialized") or self._start_seq in self._responses,
                       self.timeout, f"'initialized' after {command}")
            if self._start_seq in self._responses:  # early answer means failure (or noDebug)
                self._check(self._responses.pop(self._start_seq), command)
                self._start_seq = None
            else:
                self.wait_for_event("initialized", timeout=0)
        except BaseException:
            self.close()
            raise
        return self

    # ---------------------------------------------------------------- transport
    def send(self, command: str, arguments: dict | None = None) -> int:
        """Send a request without waiting; returns its seq for wait_response()."""
        seq = next(self._seq)
        self._write({"seq": seq, "type": "request", "command": command, "arguments": arguments or {}})
        return seq

    def _write(self, msg: dict) -> None:
        data = json.dumps(msg).encode("utf-8")
        with self._send_lock:
            try:
                self._sock.sendall(b"Content-Length: %d\r\n\r\n" % len(data) + data)
            except OSError as exc:
                raise DapError(f"send failed ({exc}) for {msg.get('command')}") from exc

    def _read_loop(self) -> None:
        """Parse Content-Length framed messages until EOF; never raises."""
        f = self._sock.makefile("rb")
        try:
            while True:
                length = None
                while True:
                    line = f.readline()
                    if not line:
                        return
                    line = line.strip()
                    if not line:
                        break
                    name, _, value = line.decode("ascii").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if length is None:
                    continue
                body = f.read(length)
                if len(body) < length:
                    return
                self._dispatch(json.loads(body.decode("utf-8")))
        except (OSError, ValueError):
            pass
        finally:
            with self._cond:
                self._eof = True
                self._cond.notify_all()

    def _dispatch(self, msg: dict) -> None:
        kind = msg.get("type")
        if kind == "request":  # reverse request: answer so the adapter never waits on us
            self._reverse_request(msg)
            return
        with self._cond:
            if kind == "response":
                self._responses[msg["request_seq"]] = msg
            elif kind == "event":
                body = msg.setdefault("body", {})
                event = msg.get("event")
                if event == "output" and body.get("category") != "telemetry":
                    self._output.append((body.get("category", "console"), body.get("output", "")))
                elif event == "process":
                    self.debuggee_pid = body.get("systemProcessId") or self.debuggee_pid
                elif event == "terminated":
                    self._terminated_at = time.monotonic()
                elif event == "stopped" and "threadId" in body:
                    self.stopped_thread = body["threadId"]
                self._events.append(msg)
                self._recent.append(msg)
            self._cond.notify_all()

    def _reverse_request(self, msg: dict) -> None:
        body: dict = {}
        ok, message = True, None
        try:
            if msg["command"] == "runInTerminal":
                a = msg.get("arguments", {})
                proc = subprocess.Popen(a["args"], cwd=a.get("cwd") or None, start_new_session=True,
                                        env={**os.environ, **{k: v for k, v in (a.get("env") or {}).items()
                                                              if v is not None}})
                self._children.append(proc)
                body = {"processId": proc.pid}
            else:  # e.g. startDebugging (not advertised): refuse rather than leave it pending
                ok, message = False, f"{msg['command']} not supported by test client"
        except Exception as exc:  # noqa: BLE001 - report it, don't kill the reader
            ok, message = False, repr(exc)
        reply = {"seq": next(self._seq), "type": "response", "request_seq": msg["seq"],
                 "command": msg["command"], "success": ok, "body": body}
        if message:
            reply["message"] = message
        try:
            self._write(reply)
        except DapError:
            pass

    # ---------------------------------------------------------------- waiting
    def _diagnostics(self) -> str:
        events = [f"{m.get('event')} {json.dumps(m.get('body'))[:160]}" for m in self._recent]
        # one tail per category: stdout and stderr arrive through separate pipes, so their events interleave at
        # any write (print's pieces included), and one joined tail would split a line of either
        categories = list(dict.fromkeys(cat for cat, _ in self._output))
        tails = "".join(f"\n{cat} tail:\n{self._joined(cat)[-1500:]}" for cat in categories)
        return "\nlast events:\n  " + "\n  ".join(events or ["<none>"]) + (tails or "\noutput: <none>")

    def _wait(self, ready: Callable[[], Any], timeout: float | None, what: str,
              grace: float | None = None) -> Any:
        """Block (under the lock) until ready() is truthy; raise DapError on timeout, EOF, or
        `grace` seconds after a 'terminated' event (nothing more will come, so don't sit out the timeout)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = ready()
                if result:
                    return result
                now = time.monotonic()
                remaining = deadline - now
                ended = grace is not None and self._terminated_at is not None \
                    and now - self._terminated_at > grace
                if self._eof or ended or remaining <= 0:
                    why = ("connection closed" if self._eof else "debuggee terminated" if ended
                           else f"timed out after {timeout}s")
                    raise DapError(f"{why} waiting for {what}{self._diagnostics()}")
                self._cond.wait(min(remaining, 0.5))

    def _has_event(self, name: str, predicate: Callable[[dict], bool] | None = None,
                   pop: bool = False) -> dict | None:
        for i, msg in enumerate(self._events):
            if msg.get("event") == name and (predicate is None or predicate(msg["body"])):
                return self._events.pop(i) if pop else msg
        return None

    def wait_for_event(self, name: str, timeout: float | None = None,
                       predicate: Callable[[dict], bool] | None = None) -> dict:
        """Return (and consume) the body of the oldest matching event, including ones already received."""
        msg = self._wait(lambda: self._has_event(name, predicate, pop=True), timeout,
                         f"event {name!r}", grace=0.5)
        return msg["body"]

    def wait_for_output(self, text: str, timeout: float | None = None, category: str | None = None) -> str:
        """Wait until `text` appears in the output (of one `category`: "stdout", "stderr", "console", if given);
        program output may trail 'terminated'. Returns that output."""
        self._wait(lambda: text in self._joined(category), timeout, f"output {text!r}", grace=2.0)
        return self.output_text(category)

    def wait_response(self, seq: int, timeout: float | None = None, command: str = "request") -> dict:
        msg = self._wait(lambda: self._responses.pop(seq, None), timeout, f"response to {command}")
        return self._check(msg, command)

    @staticmethod
    def _check(msg: dict, command: str) -> dict:
        if not msg.get("success"):
            body = msg.get("body") or {}
            detail = (body.get("error") or {}).get("format") or body.get("result") or ""
            raise DapError(f"{command} failed: {msg.get('message')} {detail}".strip(), msg)
        return msg.get("body") or {}

    def request(self, command: str, arguments: dict | None = None, timeout: float | None = None) -> dict:
        """Send a request and return its response body; DapError if success is false."""
        return self.wait_response(self.send(command, arguments), timeout, command)

    # ---------------------------------------------------------------- DAP helpers
    def set_breakpoints(self, path: str, lines: Sequence[int],
                        conditions: dict[int, str] | None = None) -> list[dict]:
        conditions = conditions or {}
        bps = [{"line": ln, **({"condition": conditions[ln]} if ln in conditions else {})} for ln in lines]
        return self.request("setBreakpoints", {"source": {"path": os.path.abspath(str(path))},
                                               "breakpoints": bps, "lines": list(lines)})["breakpoints"]

    def set_exception_breakpoints(self, filters: Sequence[str] = ("uncaught",)) -> dict:
        return self.request("setExceptionBreakpoints", {"filters": list(filters)})

    def configuration_done(self, timeout: float | None = None) -> None:
        """Finish configuration; debugpy answers the pending launch/attach only now."""
        self.request("configurationDone", timeout=timeout)
        if self._start_seq is not None:
            seq, self._start_seq = self._start_seq, None
            self.wait_response(seq, timeout, "launch/attach")

    def threads(self) -> list[dict]:
        return self.request("threads")["threads"]

    def stack_trace(self, thread_id: int, levels: int = 0) -> list[dict]:
        return self.request("stackTrace", {"threadId": thread_id, "startFrame": 0,
                                           "levels": levels})["stackFrames"]

    def scopes(self, frame_id: int) -> list[dict]:
        return self.request("scopes", {"frameId": frame_id})["scopes"]

    def variables(self, variables_reference: int) -> list[dict]:
        return self.request("variables", {"variablesReference": variables_reference})["variables"]

    def _thread(self, thread_id: int | None) -> int:
        tid = thread_id if thread_id is not None else self.stopped_thread
        if tid is None:
            raise DapError("no thread id given and no 'stopped' event seen" + self._diagnostics())
        return tid

    def frame_locals(self, thread_id: int | None = None) -> dict[str, dict]:
        """name -> variable dict of the top frame's Locals scope (last stopped thread by default)."""
        frame = self.stack_trace(self._thread(thread_id), levels=1)[0]
        scope = next((s for s in self.scopes(frame["id"]) if s["name"] == "Locals"), None)
        if scope is None:
            raise DapError(f"no Locals scope in frame {frame.get('name')}")
        return {v["name"]: v for v in self.variables(scope["variablesReference"])}

    def evaluate(self, expression: str, frame_id: int | None = None, context: str = "repl") -> dict:
        args: dict = {"expression": expression, "context": context}
        if frame_id is not None:
            args["frameId"] = frame_id
        return self.request("evaluate", args)

    def continue_(self, thread_id: int | None = None) -> dict:
        tid = self._thread(thread_id)
        self.stopped_thread = None  # a new 'stopped' event will set it again
        return self.request("continue", {"threadId": tid})

    def output_text(self, category: str | None = None) -> str:
        """All output so far, or one category's: the adapter reads stdout and stderr on their own threads, so
        a line one stream wrote in pieces may have the other's output in between in the merged text."""
        with self._cond:
            return self._joined(category)

    def _joined(self, category: str | None = None) -> str:
        return "".join(text for cat, text in self._output if category is None or cat == category)

    # ---------------------------------------------------------------- teardown
    def close(self) -> None:
        """Disconnect (terminating the debuggee) and make sure no process outlives the test."""
        if self._closed:
            return
        self._closed = True
        if not self._eof:
            try:
                self.request("disconnect", {"terminateDebuggee": True, "restart": False}, timeout=5)
            except DapError:
                pass
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._reader.join(timeout=2)
        if self._adapter is not None:
            try:
                self._adapter.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            _kill_group(self._adapter.pid, leader=True)  # the group may outlive its (exited) leader
            self._adapter.wait(timeout=5)
        if self._tmp is not None:
            self._tmp.cleanup()
        for proc in self._children:
            _kill_group(proc.pid)
            proc.wait(timeout=5)
        if self.debuggee_pid:  # normally already gone after terminateDebuggee; give it a moment
            deadline = time.monotonic() + 3
            while _alive(self.debuggee_pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(self.debuggee_pid):
                _kill_group(self.debuggee_pid)

    def __enter__(self) -> DapClient:  # noqa: PYI034 - no typing_extensions dependency
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _alive(pid: int) -> bool:
    """True if pid runs and is not a zombie (a test's un-reaped Popen child counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def _kill_group(pid: int, leader: bool = False) -> None:
    """SIGKILL pid's process group if it leads one, else just pid; ignore already-gone processes."""
    try:
        if leader or os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def attach_to_listener(argv: Sequence[str], port: int, timeout: float = 30.0, log_dir: str | None = None,
                       **popen: Any) -> tuple[subprocess.Popen, DapClient]:
    """Start a `python -m debugpy --listen 127.0.0.1:PORT --wait-for-client ...` debuggee and attach to it.

    Why the one restart: debugpy 1.8.22's adapter has, once in CI, closed a client that connected while
    it was still setting up (its server listener was re-created, then the connection dropped before
    'initialized'); the debuggee cannot be re-attached after that, so it is started again, once. Any
    other failure, or the same one twice, raises. `log_dir` keeps debugpy's logs for the diagnosis."""
    argv = list(argv)
    if log_dir is not None:
        argv[argv.index("debugpy") + 1:argv.index("debugpy") + 1] = ["--log-to", log_dir]
    for attempt in (1, 2):
        proc = subprocess.Popen(argv, **popen)
        try:
            return proc, DapClient.attach(port, host=HOST, timeout=timeout)
        except DapError as exc:
            _kill_group(proc.pid, leader=popen.get("start_new_session", False))
            proc.wait(timeout=10)
            if attempt == 2 or "connection closed waiting for 'initialized'" not in str(exc):
                raise
            print(f"debugpy adapter dropped the client before 'initialized'; restarting the debuggee: {exc}",
                  file=sys.stderr)
    raise AssertionError("unreachable")
