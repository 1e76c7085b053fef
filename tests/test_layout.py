"""The package reads like a map: layers import downwards only, no cycles, small modules, documented folders.

Imports are read from the source (top-level and inside functions, plus module names given to
``importlib`` as strings), so a cycle hidden in a function body or a command table is found too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tensor_dap"
PLUGIN = PACKAGE.parent / "pydevd_plugins" / "extensions" / "pydevd_plugin_tensor_dap.py"

# From the bottom: shared atoms, pure data, probing of live objects, the surfaces, the debugger, triggers, CLI.
LAYERS = [
    {"version", "errors", "format", "console", "kinds", "nested", "state", "dist", "runner", "libraries", "dynamo",
     "loading", "folders", "batch_origin"},
    {"summary"},
    {"probe"},
    {"checks", "profiling", "dap"},
    {"debug"},
    {"triggers"},
    {"cli", "demo"},
]
# Modules allowed past MAX_LINES, each with the reason.
LONG_MODULES: dict[str, str] = {}
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _known(name: str) -> str | None:
    """The longest tensor_dap module that ``name`` names (an attribute import names its module)."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str) -> set[str]:
    """Every tensor_dap module ``module`` imports, anywhere in its body, except under TYPE_CHECKING."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    skipped = {id(n) for node in ast.walk(tree)
               if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(filter(None, (_known(a.name) for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path, node)
            for alias in node.names:
                target = _known(f"{base}.{alias.name}") if f"{base}.{alias.name}" in MODULES else _known(base)
                if target:
                    out.add(target)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MODULES \
                and node.value != "tensor_dap":  # the bare name is a word in messages, not an import
            if module != "tensor_dap":  # the root's lazy export table is the public API, at the top
                out.add(node.value)
    out.discard(module)
    return out


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return len(LAYERS)  # the package root: the public API over everything
    for i, group in enumerate(LAYERS):
        if parts[1] in group:
            return i
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS in tests/test_layout.py")


GRAPH = {m: imports_of(m) for m in MODULES}


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_go_down(module):
    upward = [t for t in GRAPH[module] if layer_of(t) > layer_of(module)]
    assert not upward, f"{module} (layer {layer_of(module)}) imports higher layers: {upward}"


def test_no_import_cycles():
    """Tarjan's strongly connected components over the module graph: every component is one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_the_graph_sees_function_level_and_string_imports():
    """The checks above are only as good as the graph: it must see lazy and importlib edges."""
    assert "tensor_dap.debug.session" in GRAPH["tensor_dap.triggers.stop"]  # imported inside a function
    assert "tensor_dap.cli.run" in GRAPH["tensor_dap.cli.main"]  # named in the command table


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_are_small(module):
    lines = len(MODULES[module].read_text().splitlines())
    if module in LONG_MODULES:
        return
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it, or add it to LONG_MODULES with a reason"


@pytest.mark.parametrize("package", sorted(m for m, p in MODULES.items() if p.name == "__init__.py"))
def test_every_package_says_what_lives_there(package):
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text()))
    assert doc and len(doc) > 40, f"{package}/__init__.py needs a docstring saying what lives there"


def test_plugin_is_a_thin_adapter_over_dap():
    tree = ast.parse(PLUGIN.read_text())
    imported = {a.name if isinstance(n, ast.Import) else f"{n.module}.{a.name}"
                for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    ours = {name for name in imported if name.startswith("tensor_dap")}
    assert ours == {"tensor_dap.dap"}, ours
    assert not any(name.startswith("torch") for name in imported)
