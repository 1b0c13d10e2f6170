"""Compiled engines: a container's model compiled to native code that carries its container's digest.

A compiled engine is a shared library. Loading one runs its native code, so sealtrace checks it
*before* loading (the binding sidecar's digest of the very bytes that will be loaded), loads those
bytes from a private copy, and then asks the library itself which container and Plan it was compiled
from (its embedded stamp), refusing any mismatch before a single inference. docs/tvm.md.

- :mod:`sealtrace.engines.tvm`: Apache TVM (Relax ONNX frontend, LLVM CPU target).
- :mod:`sealtrace.engines.onnxruntime`: ONNX Runtime's optimized model (an ONNX file, bound like any
  artifact; no stamp of its own).
"""

from __future__ import annotations

from sealtrace.engines.tvm import (
    STAMP_FORMAT,
    STAMP_FUNCTION,
    CompiledInput,
    EngineStamp,
    TvmEngine,
    compile_tvm,
    is_tvm_library,
    load_tvm_library,
)

__all__ = [
    "STAMP_FORMAT",
    "STAMP_FUNCTION",
    "CompiledInput",
    "EngineStamp",
    "TvmEngine",
    "compile_tvm",
    "is_tvm_library",
    "load_tvm_library",
]
