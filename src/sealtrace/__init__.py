"""sealtrace: seal ONNX models, run them on a fixed plan, and record what ran."""

from __future__ import annotations

__version__ = "0.1.0"

from sealtrace.errors import SealtraceError
from sealtrace.plan import Plan, Step, ValueInfo, build_plan
from sealtrace.session import Session

__all__ = ["Plan", "SealtraceError", "Session", "Step", "ValueInfo", "__version__", "build_plan"]
