"""sealtrace: seal ONNX models, run them on a fixed plan, and record what ran."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from sealtrace.errors import SealtraceError

if TYPE_CHECKING:
    from sealtrace.plan import Plan, Step, ValueInfo, build_plan
    from sealtrace.session import Session

__all__ = ["Plan", "SealtraceError", "Session", "Step", "ValueInfo", "__version__", "build_plan"]

# Imported on first use (PEP 562): `sealtrace verify` and other light verbs need neither the Plan
# builder nor its kernels, whose import costs more than verifying a small container.
_LAZY = {"Plan": "sealtrace.plan", "Step": "sealtrace.plan", "ValueInfo": "sealtrace.plan",
         "build_plan": "sealtrace.plan", "Session": "sealtrace.session"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sealtrace' has no attribute {name!r}")
