"""``TensorPdb``: pdb with tensors shown as summaries and commands for training questions.

It is ``pdb.Pdb`` with a different way of *showing* values and a few extra commands; every
standard command, alias, ``.pdbrc`` and ``interact`` is pdb's own. The commands are thin:
the work lives in ``tensor_dap.probe`` (data) and ``views`` (rich renderables).

Importing this module stays light (no torch, no rich) so ``PYTHONBREAKPOINT`` costs nothing
until a breakpoint is actually hit.
"""

from __future__ import annotations

import pdb  # noqa: T100 - this module is a debugger
import builtins
import pprint
import sys
from typing import Any


RAW_MARK = "!"  # `p! x` / `pp! x`: the full repr, as plain pdb prints it
_complete_expression = getattr(pdb.Pdb, "_complete_expression", pdb.Pdb.completedefault)


class _Shown:
    """A ``display`` entry: the value and, for tensors, the summary it was shown as.

    Tensors are compared by their summary text, so a tensor changed in place (the same
    object) still counts as changed; other values keep pdb's own comparison.
    """

    __slots__ = ("key", "value", "view")

    def __init__(self, value: Any, view: Any = None) -> None:
        from ..summary.line import one_line

        self.value = value
        self.view = view  # a TensorView, or None for non-tensor values
        self.key = None if view is None else \
            (view.line,) + tuple((k, v if isinstance(v, str) else one_line(v)) for k, v in view.rows)

    def changed_from(self, old: _Shown) -> bool:
        if self.key is not None or old.key is not None:
            return self.key != old.key
        try:
            return self.value is not old.value and bool(self.value != old.value)
        except Exception:  # e.g. numpy arrays: ambiguous truth value
            return self.value is not old.value


class TensorPdb(pdb.Pdb):
    """pdb.Pdb that shows tensors as one-line summaries and adds tensors/nan/grads/shapes/mem/stats."""

    hide_frame: Any = None  # a predicate: the frames it accepts are left out of where/up/down

    def setup(self, f: Any, tb: Any) -> Any:
        stop = super().setup(f, tb)
        if self.hide_frame is not None:
            current = self.stack[self.curindex]
            self.stack = [e for e in self.stack if e is current or not self.hide_frame(e[0])]
            self.curindex = self.stack.index(current)
        if f is None and tb is not None:
            try:
                self._start_in_user_code(tb)
            except Exception:  # noqa: BLE001 - a post-mortem must open even where this guess fails
                pass
        return stop

    def _start_in_user_code(self, tb: Any) -> None:
        """Post-mortem of an exception raised inside a library (torch's ``binary_cross_entropy`` refusing a NaN):
        start at the frame the crash report names, the innermost of the user's code; ``down`` still goes there."""
        from .frames import failing_frame

        frame, _ = failing_frame(tb)
        index = next((i for i, (f, _) in enumerate(self.stack) if f is frame), self.curindex)
        if index == self.curindex:
            return
        raised = self.stack[-1][0]
        self.message(f"(raised in {raised.f_code.co_filename}:{self.stack[-1][1]} in {raised.f_code.co_name}; "
                     "`down` goes there)")
        self.curindex, self.curframe = index, frame
        try:
            self.curframe_locals = frame.f_locals
        except AttributeError:  # a read-only property in newer Pythons: it follows curframe
            pass

    # ------------------------------------------------------------------ output
    def _print(self, renderable: Any) -> None:
        from ..console import make_console

        try:
            make_console(file=self.stdout).print(renderable)
        except Exception as exc:  # a rendering bug must never take the debugger down
            self.error(f"tensor_dap could not render this: {type(exc).__name__}: {exc}")

    def _frame_locals(self) -> Any:
        frame_locals = getattr(self, "curframe_locals", None)
        return frame_locals if frame_locals is not None else self.curframe.f_locals

    def _defined(self, name: str) -> bool:
        return any(name in names for names in (self._frame_locals(), self.curframe.f_globals, builtins.__dict__))

    def _tensor_view(self, value: Any) -> Any:
        """The summarized form of ``value``, or None to fall back to pdb's repr."""
        if "torch" not in sys.modules:
            return None
        try:
            from ..probe.display import tensor_view

            return tensor_view(value)
        except Exception:
            return None

    def _show_value(self, value: Any, pretty: bool = False) -> None:
        view = self._tensor_view(value)
        if view is not None:
            from .views import view as render_view

            self._print(render_view(view))
        else:
            self.message(pprint.pformat(value) if pretty else repr(value))

    def _value_or_none(self, arg: str) -> Any:
        """Evaluate ``arg`` in the current frame; pdb reports a failure and we return a sentinel. A module's
        path as reports print it (``model.h.0.attn``: not Python) is walked from its first name."""
        from ..probe.paths import is_module_path, value_at

        try:
            if not is_module_path(arg.strip()):
                return self._getval(arg)
            value, missing = value_at(arg.strip(), self._getval)
        except Exception:
            return _FAILED
        if missing:
            self.error(missing)
            return _FAILED
        return value

    def _value_of(self, command: str, expr: str, check: Any, kind: str) -> Any:
        """``expr``'s value when ``check`` accepts it; else one error line (or pdb's own) and the sentinel."""
        value = self._value_or_none(expr)
        if value is not _FAILED and not check(value):
            self.error(f"{command}: {expr.strip()} is a {type(value).__name__}, not {kind}")
            return _FAILED
        return value

    # ------------------------------------------------------------------ p, pp, bare expressions
    def _print_command(self, arg: str, pretty: bool) -> None:
        raw = arg.startswith(RAW_MARK)
        if raw:
            arg = arg[len(RAW_MARK):].strip()
        value = self._value_or_none(arg)
        if value is _FAILED:
            return
        try:
            if raw:
                self.message(pprint.pformat(value) if pretty else repr(value))
            else:
                self._show_value(value, pretty)
        except Exception:
            self._error_exc()

    def do_p(self, arg: str) -> None:
        """p expression
        Print the value of the expression. Tensors show as a one-line summary, containers
        of tensors (dict, list, tuple, batch) as one line per element.
        p! expression prints the full repr instead (every value of a tensor).
        """
        self._print_command(arg, pretty=False)

    def do_pp(self, arg: str) -> None:
        """pp expression
        Pretty-print the value of the expression; tensors as summaries (see p).
        pp! expression pretty-prints the full repr instead.
        """
        self._print_command(arg, pretty=True)

    complete_p = complete_pp = _complete_expression

    def displayhook(self, obj: Any) -> None:
        """Bare expressions typed at the prompt: tensors as summaries, like p."""
        if obj is not None:
            self._show_value(obj)

    # ------------------------------------------------------------------ display
    def _shown(self, value: Any) -> _Shown:
        return _Shown(value, self._tensor_view(value))

    def do_display(self, arg: str) -> None:
        """display [expression]
        Display the value of the expression each time execution stops in this frame
        and it changed; tensors as summaries (a tensor changed in place counts as changed).
        Without expression, list the current display expressions.
        """
        if not arg:
            self.message("Currently displaying:")
            for expr, shown in self.displaying.get(self.curframe, {}).items():
                self._display_line(f"{expr}: ", shown if isinstance(shown, _Shown) else _Shown(shown))
            return
        shown = self._shown(self._getval_except(arg))
        self.displaying.setdefault(self.curframe, {})[arg] = shown
        self._display_line(f"display {arg}: ", shown)

    complete_display = _complete_expression

    def _display_line(self, prefix: str, shown: _Shown, old: _Shown | None = None) -> None:
        from rich.console import Group
        from rich.text import Text

        from .views import view as render_view

        def part(s: _Shown) -> Any:
            return render_view(s.view) if s.view is not None else Text(repr(s.value))

        items = [Text(prefix), part(shown)]
        if old is not None:
            items += [Text("  [old: "), part(old), Text("]")]
        if all(isinstance(i, Text) for i in items):
            self._print(Text.assemble(*items))
        else:
            self._print(Group(*items))

    def _refresh_display(self) -> None:
        displaying = self.displaying.get(self.curframe)
        if not displaying:
            return
        for expr, old in list(displaying.items()):
            new = self._shown(self._getval_except(expr))
            old_shown = old if isinstance(old, _Shown) else _Shown(old)
            if new.changed_from(old_shown):
                displaying[expr] = new
                self._display_line(f"display {expr}: ", new, old_shown)

    if hasattr(pdb.Pdb, "_show_display"):  # Python 3.13+ shows displays outside preloop
        def _show_display(self) -> None:
            self._refresh_display()
    else:
        def preloop(self) -> None:
            self._refresh_display()

    # ------------------------------------------------------------------ tensor commands
    def _run(self, name: str, fn: Any, *args: Any) -> None:
        """Run a command body; its failures are one error line, never a debugger crash."""
        try:
            fn(*args)
        except Exception as exc:
            self.error(f"{name}: {type(exc).__name__}: {exc}")

    def _scope(self, arg: str) -> Any:
        """Locals of the frame, or just the value of ``arg`` when one is given."""
        if not arg.strip():
            return self._frame_locals()
        value = self._value_or_none(arg)
        return None if value is _FAILED else {arg.strip(): value}

    def do_tensors(self, arg: str) -> None:
        """tensors [expression]  (alias: t)
        Table of every tensor reachable from this frame: locals, their containers, the
        parameters and buffers of modules, and the attributes of self. Flags: NaN/Inf,
        'other device' (not on the device most tensors use), requires_grad.
        At a script's top level each model is one line instead (t MODEL lists its parameters).
        With an expression, only the tensors reachable from it.
        """
        def body() -> None:
            from ..kinds import is_module
            from ..probe.scan import reachable_tensors, tensor_rows
            from ..summary.modules import describe_module
            from .views import tensors

            scope = self._scope(arg)
            if scope is None:
                return
            top_level = not arg.strip() and self.curframe.f_code.co_name == "<module>"
            found, extra = reachable_tensors(scope, modules=not top_level)
            models = [(name, str(describe_module(m, max_ms=100.0))) for name, m in scope.items()
                      if top_level and not name.startswith("_") and is_module(m)]
            self._print(tensors(tensor_rows(found), extra, models))
        self._run("tensors", body)

    do_t = do_tensors

    def do_nan(self, arg: str) -> None:
        """nan [expression]
        Which locals, parameters, buffers and gradients hold NaN or Inf, worst first
        (largest share of non-finite values). With an expression, only what it reaches.
        """
        def body() -> None:
            from ..probe.scan import nonfinite_rows, reachable_tensors
            from .views import nonfinite

            scope = self._scope(arg)
            if scope is None:
                return
            found, _ = reachable_tensors(scope, grads=True)
            self._print(nonfinite(nonfinite_rows(found), len(found)))
        self._run("nan", body)

    def do_grads(self, arg: str) -> None:
        """grads [module]
        Gradient norm of every trainable parameter of the module (default: the first nn.Module in the locals,
        then self, then the globals; a submodule as the table names it, grads transformer.h.0, is read under
        it), flagging missing, zero, vanishing (< 1e-7), exploding (> 1e3) and NaN/Inf gradients, and the total norm.
        """
        def body() -> None:
            from ..kinds import is_module
            from ..probe.grads import find_module, grad_report
            from ..probe.paths import rooted
            from .views import grads

            found = find_module(self._frame_locals(), self.curframe.f_globals) if "torch" in sys.modules else None
            if arg.strip():
                name = rooted(arg.strip(), self._defined, found[0]) if found else arg.strip()
                module = self._value_of("grads", name, is_module, "an nn.Module")
            elif found is None:
                self.error("grads: no nn.Module in this frame's locals, self or globals; name one: grads MODEL")
                return
            else:
                name, module = found
            if module is not _FAILED:
                self._print(grads(grad_report(module, name)))
        self._run("grads", body)

    complete_grads = complete_tensors = complete_nan = _complete_expression

    def do_shapes(self, arg: str) -> None:
        """shapes module input
        Run one forward pass of module on input (under no_grad, in eval mode) and show
        the input/output shapes, dtype and device of every submodule. Module state is
        untouched: train/eval flags, buffers (BatchNorm running stats) and RNG are restored.
        A tuple input is passed as several arguments, a dict as keyword arguments:
        shapes model x   |   shapes model (x, mask)   |   shapes model {'input_ids': ids}
        """
        def body() -> None:
            from ..kinds import is_module
            from ..probe.shapes import ShapesUsageError, call_args, shape_flow, split_args
            from .views import shape_flow as render_flow

            try:
                module_expr, input_expr = split_args(arg)
            except ShapesUsageError as exc:
                self.error(str(exc))
                return
            module = self._value_of("shapes", module_expr, is_module, "an nn.Module")
            if module is _FAILED:
                return
            value = self._value_or_none(input_expr)
            if value is _FAILED:
                return
            args, kwargs = call_args(value)
            try:
                flow = shape_flow(module, args, kwargs)
            except ShapesUsageError as exc:
                self.error(str(exc))
                return
            self._print(render_flow(flow, title=f"{module_expr}({input_expr})"))
        self._run("shapes", body)

    complete_shapes = _complete_expression

    def do_mem(self, arg: str) -> None:
        """mem
        Process memory (RSS now and peak), CUDA allocated / reserved / peak per device
        (when this process uses CUDA), the largest tensors in this frame, then what your
        frames from here out keep: each model's and optimizer's bytes, a running total of
        the loss or a list of outputs kept with their graphs.
        """
        def body() -> None:
            from .oom import memory_view

            self._print(memory_view(self.curframe, self._frame_locals()))
        self._run("mem", body)

    def do_stats(self, arg: str) -> None:
        """stats expression
        Every field of the tensor's summary as a table (shape, dtype, device, range, mean,
        std, NaN/Inf counts, grad), followed by a small histogram of its finite values.
        """
        def body() -> None:
            from ..summary.histogram import histogram
            from ..kinds import is_tensor
            from .views import stats
            from ..summary import describe

            if not arg.strip():
                self.error("usage: stats EXPRESSION")
                return
            value = self._value_of("stats", arg, is_tensor, "a tensor")
            if value is _FAILED:
                return
            try:
                hist = histogram(value)
            except Exception:
                hist = None
            self._print(stats(arg.strip(), describe(value), hist))
        self._run("stats", body)

    complete_stats = _complete_expression


_FAILED = object()
