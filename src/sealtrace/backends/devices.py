"""Device strings (``cpu``, ``cuda``, ``cuda:N``): parsed and checked before any model is read.

Only the torch backend has a device to choose; every other backend runs on the CPU, so ``cpu`` is
the one device they accept. A CUDA device is checked against what this process can use: torch
installed, a GPU it sees, the index in range. Each refusal is one BackendError (exit 2) naming what
is missing. Parsing imports torch only for a CUDA device.
"""

from __future__ import annotations

import importlib.util
import re

from sealtrace.errors import BackendError, InputError

# Backends that can run on a device other than the CPU.
DEVICE_BACKENDS = ("torch",)
# How float32 work runs on a GPU: faithful (TF32 off, deterministic algorithms) or tf32 (opt-in).
GPU_PRECISIONS = ("faithful", "tf32")

_DEVICE = re.compile(r"(cpu|cuda)(?::(\d{1,4}))?")


def parse_device(text: str) -> str:
    """The device ``text`` names, normalized (``cpu``, ``cuda`` or ``cuda:N``); InputError if malformed."""
    match = _DEVICE.fullmatch(text.strip().lower())
    if match is None or (match.group(1) == "cpu" and match.group(2) is not None):
        raise InputError(f"--device {text}: expected cpu, cuda or cuda:N")
    return match.group(1) if match.group(2) is None else f"cuda:{int(match.group(2))}"


def check_device(device: str, backend: str) -> str:
    """``device`` parsed and checked for ``backend``: the device it names, usable in this process."""
    device = parse_device(device)
    if device == "cpu":
        return device
    if backend not in DEVICE_BACKENDS:
        raise BackendError(f"--device {device}: the {backend} backend runs on the CPU only; "
                           f"a GPU needs --backend {' or '.join(DEVICE_BACKENDS)}")
    if importlib.util.find_spec("torch") is None:
        raise BackendError(f"--device {device}: PyTorch is not installed (pip install 'sealtrace[torch]')")
    import torch

    if not torch.cuda.is_available():
        raise BackendError(f"--device {device}: no CUDA GPU available (torch {torch.__version__} sees none)")
    index = int(device.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        raise BackendError(f"--device {device}: no such GPU; torch sees {count} (cuda:0 to cuda:{count - 1})")
    return device


def check_precision(precision: str | None, device: str | None) -> str:
    """The GPU precision for ``device``: faithful unless ``precision`` opts in to tf32 on a GPU."""
    if precision is None:
        return "faithful"
    if precision not in GPU_PRECISIONS:
        raise InputError(f"--gpu-precision {precision}: expected one of {', '.join(GPU_PRECISIONS)}")
    if precision != "faithful" and (device is None or not device.startswith("cuda")):
        raise InputError(f"--gpu-precision {precision}: only a CUDA device (--device cuda) has a precision to choose")
    return precision


__all__ = ["DEVICE_BACKENDS", "GPU_PRECISIONS", "check_device", "check_precision", "parse_device"]
