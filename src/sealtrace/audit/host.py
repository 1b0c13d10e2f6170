"""Host facts that decide whether two runs can be bit-identical: CPU, BLAS, threads, versions.

Floating-point results of the same Plan on the same input can differ between hosts when the BLAS
library, its kernel selection (CPU flags) or its thread count differ. The header of every audit log
records these facts so a replay that differs can be traced to the machine rather than the model.
"""

from __future__ import annotations

import os
import platform
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

# Environment variables that set the thread count of BLAS and OpenMP runtimes.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def cpu_facts(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, Any]:
    """CPU model and feature flags (sorted) from /proc/cpuinfo; the machine type elsewhere."""
    facts: dict[str, Any] = {"machine": platform.machine(), "model": None, "flags": []}
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return facts
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key == "model name" and facts["model"] is None:
            facts["model"] = value.strip()
        elif key in ("flags", "Features") and not facts["flags"]:
            facts["flags"] = sorted(set(value.split()))
        if facts["model"] is not None and facts["flags"]:
            break  # the first processor describes them all on the hosts we know
    return facts


def blas_facts() -> dict[str, Any]:
    """NumPy's BLAS and LAPACK: name, version and build configuration."""
    try:
        config = np.show_config(mode="dicts")
    except Exception:
        return {}
    deps = config.get("Build Dependencies", {}) if isinstance(config, dict) else {}
    facts: dict[str, Any] = {}
    for lib in ("blas", "lapack"):
        entry = deps.get(lib)
        if isinstance(entry, dict):
            facts[lib] = {
                k: str(entry[k])
                for k in ("name", "version", "openblas configuration")
                if entry.get(k) is not None
            }
    return facts


def thread_facts() -> dict[str, Any]:
    """Thread-count settings from the environment, and the CPUs this process may use."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable,
        "env": {name: os.environ[name] for name in THREAD_VARIABLES if name in os.environ},
    }


@cache
def _static_facts() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "cpu": cpu_facts(),
        "blas": blas_facts(),
    }


def host_facts() -> dict[str, Any]:
    """Everything above as one JSON-ready dict (CPU and BLAS facts are read once per process)."""
    facts = dict(_static_facts())
    facts["threads"] = thread_facts()
    return facts
