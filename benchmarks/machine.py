"""Facts about the machine and libraries, printed at the top of BENCHMARKS.md."""

from __future__ import annotations

import os
import platform


def machine_facts() -> dict[str, str]:
    import numpy as np
    import onnx
    import onnxruntime as ort

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    blas = "unknown"
    try:
        config = np.show_config(mode="dicts")
        info = config["Build Dependencies"]["blas"]
        blas = f"{info.get('name')} {info.get('version')}"
    except Exception:
        pass
    facts = {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas,
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
    }
    try:
        import torch

        facts["torch"] = torch.__version__
    except ImportError:
        pass
    return facts


def facts_markdown(threads: int) -> str:
    facts = machine_facts()
    lines = [f"- {k}: {v}" for k, v in facts.items()]
    lines.append(f"- threads: {threads} (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS and ORT intra_op_num_threads)")
    return "\n".join(lines)
