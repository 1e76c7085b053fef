"""Which functions ``--mode line`` profiles, found as the program defines them.

``--function`` names functions in modules the program has not imported yet, or in the
script itself, whose functions exist only once its ``def`` statements have run and are
often called right after. So the functions are marked in the source as it is compiled: the
script's and each named module's syntax tree gets a marking decorator on the matching
``def`` (line numbers unchanged, like kernprof's ``--prof-mod``), through an import hook
for modules and around ``compile`` for the script. Modules imported before the run are
looked up directly. A name never found is reported after the run. With no ``--function``
and no ``@profile`` in the script (or the ``-m`` module), it is profiled whole: its module-level
code, its top-level functions and the methods of its top-level classes.
"""

from __future__ import annotations

import ast
import builtins
import importlib.abc
import importlib.machinery
import os
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..errors import UsageError
from ..runner import Target
from . import marks
from .source_defs import dotted_defs

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_MARK = ("tensor_dap.profiling.marks", "profile")


@dataclass(frozen=True)
class FunctionSpec:
    """One ``--function``: a (dotted) name in the program, in a module, or in a file."""

    text: str
    qualname: str  # "train_step", "Net.forward" (nested functions: "outer.inner")
    module: Optional[str] = None  # dotted module name; None with path None: the program itself
    path: Optional[str] = None  # absolute path of a .py file

    def matches(self, dotted: str) -> bool:
        """A bare name matches a function of that name anywhere in the file; a dotted one, its full path."""
        return dotted == self.qualname or ("." not in self.qualname and dotted.rsplit(".", 1)[-1] == self.qualname)


def parse_spec(text: str) -> FunctionSpec:
    """``NAME``, ``MODULE:NAME`` or ``FILE.py:NAME``, where NAME may be dotted (``Class.method``)."""
    where, _, name = text.rpartition(":")
    if not _DOTTED.match(name):
        raise UsageError(f"--function {text!r}: expected [MODULE:]NAME, e.g. train_step or mypkg.model:Net.forward")
    if not where:
        return FunctionSpec(text, name)
    if where.endswith(".py") or os.sep in where:
        return FunctionSpec(text, name, path=os.path.abspath(where))
    if not _DOTTED.match(where):
        raise UsageError(f"--function {text!r}: {where!r} is neither a module name nor a .py file")
    return FunctionSpec(text, name, module=where)


def _outer_defs(tree: ast.AST) -> list[ast.AST]:
    """The functions a script defines outside any function: its top-level ones (under ``if __name__ ...`` too) and
    the methods of its top-level classes. A function nested in another is left to the line that calls it: it is
    made again at each call (a closure a step), and each new one would be added to the profiler again."""
    out: list[ast.AST] = []
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, in_class = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append(child)
            elif isinstance(child, ast.ClassDef):
                if not in_class:
                    stack.append((child, True))
            elif isinstance(child, ast.stmt):
                stack.append((child, in_class))
    return out


def _marks_its_own(tree: ast.AST) -> bool:
    """Whether a function in ``tree`` is decorated ``@profile`` or ``@something.profile`` (kernprof's convention,
    ``@tensor_dap.profile``)."""
    return any(isinstance(d, ast.Name) and d.id == "profile" or isinstance(d, ast.Attribute) and d.attr == "profile"
               for _, node in dotted_defs(tree) for d in node.decorator_list)  # type: ignore[attr-defined]


def _marker_at(node: ast.AST) -> ast.expr:
    """``__import__('tensor_dap.profiling.marks', fromlist=['_']).profile`` at ``node``'s line."""
    module, attr = _MARK
    call = ast.Call(func=ast.Name("__import__", ast.Load()), args=[ast.Constant(module)],
                    keywords=[ast.keyword("fromlist", ast.List([ast.Constant("_")], ast.Load()))])
    expr = ast.Attribute(call, attr, ast.Load())
    for part in ast.walk(expr):
        ast.copy_location(part, node)
        part.end_lineno, part.end_col_offset = node.lineno, node.col_offset  # type: ignore[attr-defined]
    return expr


@dataclass
class Targets:
    """The specs of one run, and which of them were found where."""

    specs: list[FunctionSpec]
    program: Target
    # no --function: the script whole, its module-level code (a loop at top level, as nanoGPT's) and every function
    whole_script: bool = False
    marker: Optional[Callable[[Any], Any]] = None  # what profiles a function (``Installed`` sets it)
    found: dict[str, list[str]] = field(default_factory=dict)  # spec text -> ["file:line name", ...]
    imported: set[str] = field(default_factory=set)  # modules named by a spec that were loaded

    def _for_file(self, path: str, module: Optional[str]) -> list[FunctionSpec]:
        path = os.path.abspath(path)
        out = []
        for spec in self.specs:
            if spec.path is not None:
                hit = spec.path == path
            elif spec.module is not None:
                hit = spec.module == module or (module == "__main__" and spec.module == self.program.label)
                hit = hit or (self.program.path == path and spec.module in (self.program.label, "__main__"))
            else:
                hit = module in ("__main__", self.program.module) or path == self.program.path
            if hit:
                out.append(spec)
        return out

    def rewrite(self, source: Any, path: str, module: Optional[str]) -> Optional[ast.Module]:
        """The syntax tree of ``source`` with matching functions marked; None when nothing matches."""
        whole = self.whole_script and self.is_program(path, module)
        specs = self._for_file(path, module)
        if not (specs or whole):
            return None
        tree = ast.parse(source, path)
        if whole and _marks_its_own(tree):  # the script chose its functions (@profile): those, not all
            whole = self.whole_script = False
        if whole:
            for node in _outer_defs(tree):
                node.decorator_list.append(_marker_at(node))  # type: ignore[attr-defined]
            return ast.fix_missing_locations(tree)
        for dotted, node in dotted_defs(tree):
            for spec in specs:
                if spec.matches(dotted):
                    node.decorator_list.append(_marker_at(node))  # type: ignore[attr-defined]
                    self.found.setdefault(spec.text, []).append(f"{path}:{node.lineno} {dotted}")  # type: ignore
                    break
        return ast.fix_missing_locations(tree)

    def is_program(self, path: str, module: Optional[str]) -> bool:
        """The script (or the ``-m`` module) the run is of."""
        return os.path.abspath(path) == self.program.path or (module is not None and module == self.program.module)

    def whole_code(self, code: Any) -> Any:
        """The program's module-level code, profiled when the program is profiled whole: line_profiler takes
        functions, so it is handed one made of that code, and the code it then traces (its own copy) is what
        runs."""
        if not self.whole_script or self.marker is None:
            return code
        function = types.FunctionType(code, {})
        self.marker(function)
        return function.__code__

    def resolve_loaded(self, add: Callable[[Any], Any]) -> None:
        """Functions of modules already imported before the run: looked up and added now."""
        for spec in self.specs:
            mod = sys.modules.get(spec.module or "") if spec.module else None
            if mod is None or spec.module == self.program.label:
                continue
            obj: Any = mod
            for part in spec.qualname.split("."):
                obj = getattr(obj, part, None)
            if obj is not None and callable(obj):
                add(obj)
                code = getattr(getattr(obj, "__func__", obj), "__code__", None)
                line = code.co_firstlineno if code is not None else 0
                self.found.setdefault(spec.text, []).append(f"{getattr(mod, '__file__', spec.module)}:{line} "
                                                            f"{spec.qualname}")

    def missing(self) -> list[str]:
        """One line per spec never found, saying why as far as it is known."""
        out = []
        for spec in self.specs:
            if spec.text in self.found:
                continue
            if spec.module and spec.module != self.program.label and spec.module not in self.imported \
                    and spec.module not in sys.modules:
                out.append(f"--function {spec.text}: the program never imported {spec.module}")
            else:
                where = spec.path or spec.module or self.program.path or self.program.module
                out.append(f"--function {spec.text}: no function {spec.qualname} in {where}")
        return out


class _RewritingLoader(importlib.machinery.SourceFileLoader):
    """Compiles a named module from its source, marked (its cached bytecode would not be)."""

    targets: Targets

    def get_code(self, fullname: str) -> Any:
        path = self.get_filename(fullname)
        source = self.get_data(path)
        tree = self.targets.rewrite(source, path, fullname)
        self.targets.imported.add(fullname)
        code = compile(tree if tree is not None else source, path, "exec", dont_inherit=True)
        return self.targets.whole_code(code) if fullname == self.targets.program.module else code


class _Finder(importlib.abc.MetaPathFinder):
    """Hands named modules to ``_RewritingLoader``; every other import goes on as before."""

    def __init__(self, targets: Targets) -> None:
        self.targets = targets
        self.modules = {s.module for s in targets.specs if s.module} | {targets.program.module or "__main__"}
        self.paths = {s.path for s in targets.specs if s.path}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in self.modules and not self.paths:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            origin = os.path.abspath(spec.origin) if spec.origin else ""
            wanted = fullname in self.modules or origin in self.paths
            if wanted and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
                loader = _RewritingLoader(fullname, spec.origin)
                loader.targets = self.targets
                spec.loader = loader
            return spec
        return None


class Installed:
    """The hooks of one line profile: the import hook, ``compile`` for the script, ``builtins.profile``."""

    def __init__(self, targets: Targets, marker: Callable[[Any], Any]) -> None:
        self.targets = targets
        targets.marker = marker
        self.finder = _Finder(targets)
        self._compile = builtins.compile
        self._had_profile = hasattr(builtins, "profile")
        targets.resolve_loaded(marker)
        sys.meta_path.insert(0, self.finder)
        self._hook = self._compile_script  # one bound method, so remove() can tell it is still ours
        builtins.compile = self._hook  # type: ignore[assignment]
        if not self._had_profile:  # kernprof's name, so code written for it runs unchanged
            builtins.profile = marks.profile  # type: ignore[attr-defined]

    def _compile_script(self, source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
        script = self.targets.program.path
        if script and mode == "exec" and isinstance(filename, str) and os.path.abspath(filename) == script \
                and isinstance(source, (str, bytes)):
            builtins.compile = self._compile  # type: ignore[assignment]  # the script is compiled once
            tree = self.targets.rewrite(source, script, "__main__")
            if tree is not None:
                source = tree
            return self.targets.whole_code(self._compile(source, filename, mode, *args, **kwargs))
        return self._compile(source, filename, mode, *args, **kwargs)

    def remove(self) -> None:
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        if builtins.compile is self._hook:  # type: ignore[comparison-overlap]
            builtins.compile = self._compile  # type: ignore[assignment]
        if not self._had_profile and hasattr(builtins, "profile"):
            del builtins.profile  # type: ignore[attr-defined]
