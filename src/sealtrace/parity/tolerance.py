"""Tolerances: how far apart two values may be and still agree, per op type and value name, and
the tolerance files (TOML or JSON) that set them."""

from __future__ import annotations

import json
import math
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sealtrace.errors import InputError
from sealtrace.limits import read_regular_file

_MAX_TOLERANCE_FILE = 16 << 20  # a table of names and numbers; more is not a tolerance file


@dataclass(frozen=True)
class Tolerance:
    """Allowed difference: |a - b| <= atol + rtol * |b| elementwise (numpy.allclose's rule)."""

    atol: float = 1e-4
    rtol: float = 1e-3

    def to_json(self) -> dict[str, float]:
        return {"atol": self.atol, "rtol": self.rtol}


@dataclass(frozen=True)
class ToleranceTable:
    """A default tolerance with overrides per op type and per value name (value beats op)."""

    default: Tolerance = field(default_factory=Tolerance)
    ops: dict[str, Tolerance] = field(default_factory=dict)
    values: dict[str, Tolerance] = field(default_factory=dict)

    def for_value(self, op_type: str, name: str) -> Tolerance:
        return self.values.get(name) or self.ops.get(op_type) or self.default

    def to_json(self) -> dict[str, Any]:
        return {
            "default": self.default.to_json(),
            "ops": {k: v.to_json() for k, v in sorted(self.ops.items())},
            "values": {k: v.to_json() for k, v in sorted(self.values.items())},
        }

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ToleranceTable:
        """Read a .toml or .json file: ``[default]`` atol/rtol, ``[ops.Conv]``, ``[values."name"]``."""
        file = Path(path)
        # A regular file of a sane size only: /dev/zero or a FIFO would be a read without end.
        raw = read_regular_file(file, "tolerance file", max_bytes=_MAX_TOLERANCE_FILE)
        kind = "JSON" if file.suffix == ".json" else "TOML"
        try:
            text = raw.decode("utf-8")
            data = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise InputError(f"{file}: not valid {kind} ({' '.join(str(exc).split())[:160]})") from None
        except RecursionError:
            raise InputError(f"{file}: not valid {kind} (nested too deeply)") from None
        if not isinstance(data, dict):
            raise InputError(f"{file}: a tolerance file is a table of sections (default, ops, values)")
        unknown = set(data) - {"default", "ops", "values"}
        if unknown:
            raise InputError(f"{file}: unknown section(s) {', '.join(sorted(unknown))}")
        for section in ("ops", "values"):
            if not isinstance(data.get(section, {}), dict):
                raise InputError(f"{file}: [{section}] must be a table of names")

        def tol(entry: Any, where: str) -> Tolerance:
            if not isinstance(entry, dict) or set(entry) - {"atol", "rtol"}:
                raise InputError(f"{file}: {where} must have only 'atol' and 'rtol'")
            try:
                values = {k: float(v) for k, v in entry.items()}
            except (TypeError, ValueError):
                raise InputError(f"{file}: {where}: atol and rtol must be numbers") from None
            if any(v < 0 or math.isnan(v) for v in values.values()):
                raise InputError(f"{file}: {where}: tolerances must be non-negative")
            return Tolerance(**values)

        default = tol(data.get("default", {}), "[default]")
        ops = {k: tol(v, f"[ops.{k}]") for k, v in data.get("ops", {}).items()}
        values = {k: tol(v, f"[values.{k}]") for k, v in data.get("values", {}).items()}
        return cls(default, ops, values)

    @classmethod
    def from_options(cls, atol: float | None, rtol: float | None, tolerance_file: str | None) -> ToleranceTable:
        """The table a command's ``--atol``/``--rtol`` or ``--tolerance-file`` give (not both)."""
        if tolerance_file:
            if atol is not None or rtol is not None:
                raise InputError("give either --atol/--rtol or --tolerance-file, not both")
            return cls.load(tolerance_file)
        default = Tolerance()
        return cls(Tolerance(default.atol if atol is None else atol, default.rtol if rtol is None else rtol))


def within(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> bool:
    """True when a and b have one shape and agree within ``tol`` (NaNs equal)."""
    return a.shape == b.shape and bool(np.allclose(a, b, atol=tol.atol, rtol=tol.rtol, equal_nan=True))
