"""ONNX Runtime's optimized model of a sealed model, bound to its container.

Compiling (:func:`compile_onnxruntime`, ``sealtrace compile MODEL.seal -o model.onnx``): the
container is verified, ONNX Runtime optimizes the graph at the chosen level and writes it out, and
the optimized model is bound to the container (a sidecar ``model.onnx.binding.json``, the record
also embedded in the model's metadata; docs/binding.md).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sealtrace.binding import BindingRecord, bind_written, sidecar_path
from sealtrace.errors import InputError, SealtraceError
from sealtrace.outputs import atomic_output, check_output

TRANSFORMATION = "onnxruntime-graph-optimization"


def compile_onnxruntime(
    container: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    level: str = "all",
    sign_with: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> BindingRecord:
    """Verify ``container``, write ONNX Runtime's optimized model to ``output``, and bind it.

    ``output`` and its sidecar ``output.binding.json`` are checked before any work: an existing one
    is refused unless ``overwrite``. The binding names the digest of the container that was
    verified and compiled (it is not opened a second time).
    """
    import onnxruntime as ort

    from sealtrace.container import load_verified_model

    levels = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if level not in levels:
        raise InputError(f"--level {level}: choose one of {', '.join(levels)}")
    out = check_output(output, overwrite, "-o")
    check_output(sidecar_path(out), overwrite, "binding sidecar")
    verified = load_verified_model(container)
    assert verified.report.digest is not None
    with tempfile.TemporaryDirectory(prefix="sealtrace-compile-") as tmp:
        optimized = Path(tmp) / out.name
        options = ort.SessionOptions()
        options.graph_optimization_level = levels[level]
        options.optimized_model_filepath = str(optimized)
        options.log_severity_level = 3
        try:
            ort.InferenceSession(verified.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types
            raise SealtraceError(f"onnxruntime cannot optimize the model: {str(exc).splitlines()[0]}") from None
        data = optimized.read_bytes()
    with atomic_output(out, force=overwrite) as f:
        f.write(data)
    return bind_written(
        out,
        data,
        verified.report.digest,
        transformation=TRANSFORMATION,
        backend="onnxruntime",
        backend_version=str(ort.__version__),
        options={"graph_optimization_level": level, "execution_provider": "CPUExecutionProvider"},
        sign_with=sign_with,
        embed=True,
        overwrite=overwrite,
    )
