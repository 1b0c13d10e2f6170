"""The --device and --gpu-precision options, one definition shared by every verb that runs a model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from sealtrace.backends.devices import GPU_PRECISIONS, parse_device

F = TypeVar("F", bound=Callable[..., Any])


def _parsed(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # Malformed device strings are refused at once; whether the device is usable is checked with
    # the backend (sealtrace.backends.make_backend), which knows whether it has a device to choose.
    return None if value is None else parse_device(value)


def device_options(command: F) -> F:
    """``--device cpu|cuda[:N]`` and ``--gpu-precision faithful|tf32`` (torch only; docs/torchbridge.md)."""
    command = click.option(
        "--gpu-precision", "gpu_precision", type=click.Choice(GPU_PRECISIONS), default=None,
        help="float32 on a GPU: faithful (default: TF32 off, deterministic algorithms) or tf32 "
             "(faster, recorded in --audit logs).",
    )(command)  # fmt: skip
    return click.option(
        "--device", default=None, metavar="cpu|cuda[:N]", callback=_parsed,
        help="Where the torch backend runs (default cpu); other backends run on the CPU only.",
    )(command)  # fmt: skip
