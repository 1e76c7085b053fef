"""debugpy (pydevd) plugin: tensor_dap's summaries in VS Code's Variables panel, hover and Watch.

pydevd imports every ``pydevd_plugins.extensions.pydevd_plugin*`` module on ``sys.path`` when the
debugger starts, in every debugged program, so this module stays a thin adapter: it never imports
torch (``tensor_dap.dap`` finds torch's classes in ``sys.modules``), and all logic lives in
``tensor_dap.dap``.

pydevd disables a provider for a whole type after its first exception and freezes the session
while a provider runs, so every call below catches everything, falls back to a readable message
for that one value, and renders within a time budget (``tensor_dap.dap.pacing``).

Set ``TENSOR_DAP_DISABLE_PLUGIN=1`` in the debugged program's environment to get pydevd's
plain rendering back.
"""

import os

from _pydevd_bundle.pydevd_extension_api import StrPresentationProvider, TypeResolveProvider

__all__ = ["TensorDapResolveProvider", "TensorDapStrProvider"]

_state = {}  # the render module and its pacer, loaded on first use


def _enabled():
    return os.environ.get("TENSOR_DAP_DISABLE_PLUGIN", "").strip().lower() in ("", "0", "false", "no")


def _render():
    """tensor_dap.dap, or None if it cannot be imported (then pydevd renders as usual)."""
    if "render" not in _state:
        try:
            from tensor_dap import dap

            _state["render"] = dap
            _state["pacer"] = dap.debugger_pacer()
        except Exception:  # noqa: BLE001 - a broken install leaves pydevd as it was
            _state["render"] = None
    return _state["render"]


def _can_provide(type_object, want_children):
    try:
        if not _enabled():
            return False
        render = _render()
        if render is None:
            return False
        kind = render.kind_of(type_object)
        return render.expandable(kind) if want_children else kind is not None
    except Exception:  # noqa: BLE001 - pydevd disables a provider that raises
        return False


def _paced(fn):
    """Run fn(budget) within the pacer's budget (see tensor_dap.dap.pacing)."""
    pacer = _state.get("pacer")
    if pacer is None:
        return fn(None)
    with pacer.paced() as budget:
        return fn(budget)


class TensorDapStrProvider(StrPresentationProvider):
    """The value line of tensors, modules, optimizers, schedulers, loaders and tensor batches."""

    def can_provide(self, type_object, type_name):
        return _can_provide(type_object, want_children=False)

    def get_str(self, val):
        return self.get_str_in_context(val, None)

    def get_str_in_context(self, val, context):
        render = _render()
        try:
            kind = render.kind_of(type(val))
            return _paced(lambda budget: render.value_text(val, kind, context, budget))
        except Exception as exc:  # noqa: BLE001 - pydevd disables a provider that raises
            return _fallback_text(render, val, exc)


class TensorDapResolveProvider(TypeResolveProvider):
    """Ordered children, each with an evaluateName so "Add to Watch" works."""

    def can_provide(self, type_object, type_name):
        return _can_provide(type_object, want_children=True)

    def get_contents_debug_adapter_protocol(self, obj, fmt=None):
        render = _render()
        try:
            kind = render.kind_of(type(obj))
            return _paced(lambda budget: render.children(obj, kind, budget))
        except Exception as exc:  # noqa: BLE001 - pydevd disables a provider that raises
            try:
                return render.fallback_children(obj, exc)
            except Exception:  # noqa: BLE001 - pydevd disables a provider that raises
                return []

    def get_dictionary(self, obj):
        return {name: value for name, value, _ in self.get_contents_debug_adapter_protocol(obj)}

    def resolve(self, var, attribute):
        return self.get_dictionary(var).get(attribute)


def _fallback_text(render, val, exc):
    try:
        return render.fallback_text(val, exc)
    except Exception:  # noqa: BLE001 - pydevd disables a provider that raises
        return f"{type(val).__name__} (tensor_dap could not render this value)"

