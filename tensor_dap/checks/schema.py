"""JSON Schemas (draft 2020-12) of ``CheckResult.to_dict()`` and of the doctor's report, for machines.

``tensor-dap doctor --json`` prints a document valid against ``DOCTOR_SCHEMA``; every check's
``to_dict()`` is valid against ``RESULT_SCHEMA``. Numbers that are not finite appear as the
strings "nan", "inf" and "-inf". Fields may be added in later versions; none will be removed
or change type without a new ``$id``.
"""

from __future__ import annotations

from typing import Any

_STR = {"type": "string"}
_OPT_STR = {"type": ["string", "null"]}
_OPT_INT = {"type": ["integer", "null"]}
_OPT_BOOL = {"type": ["boolean", "null"]}
_CELL = {"type": ["string", "number", "integer", "boolean", "null", "array"]}


def _object(properties: dict[str, Any], *, extra: bool = True) -> dict[str, Any]:
    return {"type": "object", "required": sorted(properties), "properties": properties,
            "additionalProperties": extra}


FINDING = _object({
    "level": {"enum": ["info", "warning", "problem"]},
    "subject": _STR,
    "message": _STR,
    "advice": _STR,
}, extra=False)

RESULT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "tensor_dap/check-result/1",
    **_object({
        "check": _STR,
        "verdict": {"enum": ["ok", "warning", "problem"]},
        "summary": _STR,
        "findings": {"type": "array", "items": FINDING},
        "columns": {"type": "array", "items": _STR},
        "rows": {"type": "array", "items": {"type": "object", "additionalProperties": _CELL}},
        "omitted_rows": {"type": "integer", "minimum": 0},
        "facts": {"type": "object"},
    }, extra=False),
}

_GPU = _object({
    "index": _OPT_INT,
    "name": _OPT_STR,
    "memory_total_bytes": _OPT_INT,
    "memory_used_bytes": _OPT_INT,
    "driver": _OPT_STR,
    "source": {"enum": ["nvidia-smi", "torch"]},
})

DOCTOR_FACTS = _object({
    "tensor-dap": _object({"version": _STR, "path": _STR}),
    "python": _object({"version": _STR, "implementation": _STR, "executable": _STR, "platform": _STR}),
    "torch": _object({
        "version": _OPT_STR, "path": _OPT_STR, "error": _OPT_STR, "cuda_build": _OPT_STR, "cudnn": _OPT_STR,
        "hip": _OPT_STR, "debug": _OPT_BOOL, "cuda_available": {"type": "boolean"},
        "mps_available": {"type": "boolean"}, "cuda_visible_devices": _OPT_STR,
        "gpus": {"type": "array", "items": _GPU}, "gpu_source": _STR,
    }),
    "blas": _object({"torch_blas": _OPT_STR, "torch_lapack": _OPT_STR, "mkl": _OPT_BOOL, "mkldnn": _OPT_BOOL,
                     "openmp": _OPT_BOOL, "cpu_capability": _OPT_STR, "numpy_blas": _OPT_STR}),
    "packages": {"type": "object", "required": ["torch", "debugpy", "rich", "tensorboard", "line_profiler"],
                 "additionalProperties": _OPT_STR},
    "plugin": _object({"module": _STR, "discoverable": {"type": "boolean"}, "path": _OPT_STR,
                       "providers": {"type": "array", "items": _STR}, "searched": {"type": "array", "items": _STR},
                       "error": _OPT_STR, "disabled_by_env": {"type": "boolean"}}),
    "breakpoint": _object({"PYTHONBREAKPOINT": _OPT_STR, "importable": _OPT_BOOL}),
    "cpu": _object({"logical": _OPT_INT, "available": _OPT_INT, "cgroup_limit": {"type": ["number", "null"]},
                    "torch_threads": _OPT_INT, "torch_interop_threads": _OPT_INT,
                    "env": {"type": "object", "additionalProperties": _OPT_STR}}),
})

DOCTOR_SCHEMA: dict[str, Any] = {
    **RESULT_SCHEMA,
    "$id": "tensor_dap/doctor/1",
    "properties": {**RESULT_SCHEMA["properties"], "check": {"const": "doctor"}, "facts": DOCTOR_FACTS},
}
