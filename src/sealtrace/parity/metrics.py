"""How far apart two values are: the metrics every parity and diff report uses."""

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
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"{file}: cannot read tolerance file ({exc.strerror})") from None
        try:
            data = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
        except (ValueError, tomllib.TOMLDecodeError) as exc:
            raise InputError(f"{file}: not valid {'JSON' if file.suffix == '.json' else 'TOML'} ({exc})") from None
        unknown = set(data) - {"default", "ops", "values"}
        if unknown:
            raise InputError(f"{file}: unknown section(s) {', '.join(sorted(unknown))}")

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


@dataclass(frozen=True)
class ValueDiff:
    """The difference between one value on backend A and the same value on backend B."""

    name: str
    dtype: str
    shape: tuple[int, ...] | None
    max_abs: float = 0.0
    mean_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: int | None = None
    cosine: float | None = None
    nan_mismatch: int = 0
    inf_mismatch: int = 0
    shape_mismatch: str | None = None
    dtype_mismatch: str | None = None
    exceeds: bool = False
    layout: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": None if self.shape is None else list(self.shape),
            "max_abs": _finite(self.max_abs),
            "mean_abs": _finite(self.mean_abs),
            "max_rel": _finite(self.max_rel),
            "max_ulp": self.max_ulp,
            "cosine": None if self.cosine is None else _finite(self.cosine),
            "nan_mismatch": self.nan_mismatch,
            "inf_mismatch": self.inf_mismatch,
            "shape_mismatch": self.shape_mismatch,
            "dtype_mismatch": self.dtype_mismatch,
            "exceeds": self.exceeds,
            "layout": None if self.layout is None else list(self.layout),
        }


def _finite(x: float) -> float | str:
    # JSON has no inf/nan; spell them so the report stays valid JSON.
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


_ULP_INT: dict[int, type[np.signedinteger[Any]]] = {2: np.int16, 4: np.int32, 8: np.int64}


def ulp_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Largest number of representable floats between a and b, elementwise (non-finite ignored)."""
    itype = _ULP_INT.get(a.dtype.itemsize)
    if itype is None or a.dtype.kind != "f":
        return 0
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.any():
        return 0
    ia = a.view(itype)[finite] if not finite.all() else a.view(itype).reshape(-1)
    ib = b.view(itype)[finite] if not finite.all() else b.view(itype).reshape(-1)
    # Map sign-magnitude onto a monotonic integer line (-0.0 and +0.0 become neighbours); the
    # mapped values still fit the same width, and the difference is taken in int64.
    low = itype(np.iinfo(itype).min)
    ia = np.where(ia < 0, low - ia, ia)
    ib = np.where(ib < 0, low - ib, ib)
    return int(np.abs(np.subtract(ia, ib, dtype=np.int64)).max())


def compare_values(name: str, a: Any, b: Any, tol: Tolerance) -> ValueDiff:
    """Compare value ``a`` (backend A) with ``b`` (backend B); sequences compare element by element."""
    if isinstance(a, list) or isinstance(b, list):
        return _compare_sequences(name, a, b, tol)
    if a is None or b is None:
        exceeds = (a is None) != (b is None)
        return ValueDiff(name, "none", None, exceeds=exceeds, shape_mismatch="missing on one side" if exceeds else None)
    a = np.asarray(a)
    b = np.asarray(b)
    dtype = _dtype_name(a.dtype)
    if a.dtype != b.dtype:
        return ValueDiff(name, dtype, a.shape, dtype_mismatch=f"{a.dtype} vs {b.dtype}", exceeds=True)
    if a.shape != b.shape:
        from sealtrace.parity.layout import find_permutation

        layout = find_permutation(a, b, tol)
        return ValueDiff(
            name, dtype, a.shape, shape_mismatch=f"{list(a.shape)} vs {list(b.shape)}", exceeds=True, layout=layout
        )
    if a.dtype.kind not in "fc" and a.dtype.kind != "V":
        if a.dtype.kind in "iub":
            diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.size else np.zeros(0)
            max_abs = float(diff.max()) if diff.size else 0.0
            return ValueDiff(name, dtype, a.shape, max_abs=max_abs, mean_abs=float(diff.mean()) if diff.size else 0.0,
                             max_ulp=None, exceeds=max_abs > 0)
        equal = bool(np.array_equal(a, b))
        return ValueDiff(name, dtype, a.shape, exceeds=not equal, max_abs=0.0 if equal else math.inf)
    return _compare_floats(name, a, b, tol)


def _equal_floats(name: str, a: np.ndarray) -> ValueDiff:
    return ValueDiff(name, _dtype_name(a.dtype), a.shape, max_ulp=0 if a.dtype.kind == "f" else None, cosine=1.0)


def _compare_floats(name: str, a: np.ndarray, b: np.ndarray, tol: Tolerance) -> ValueDiff:
    # Equal values are the common case (shape and indexing steps, most local re-runs): a plain
    # array_equal is one fast pass; equal_nan=True costs ten times more, so it is left to the
    # general path, which reaches the same answer when NaNs are all that made the check fail.
    if a.size and bool((a == b).all()):  # np.array_equal's test, without its checks (shapes agree here)
        return _equal_floats(name, a)
    if a.dtype == np.float32 or a.dtype == np.float64:
        fast = _compare_finite(name, a, b, tol)
        if fast is not None:
            return fast
    return _compare_floats_general(name, a, b, tol)


def _compare_finite(name: str, a: np.ndarray, b: np.ndarray, tol: Tolerance) -> ValueDiff | None:
    """The general path's figures, bit for bit, for float32/float64 values with no NaN or Inf
    (None otherwise), in about a third of the passes over memory.

    The sums of squares for the cosine double as the finiteness check: a sum of non-negative terms
    is finite only if every term is. The elementwise tolerance test is skipped when even the largest
    difference is within atol (every bound is at least atol).
    """
    fa = a.reshape(-1)
    fb = b.reshape(-1)
    if fa.size == 0:
        return None
    # One errstate for the lot (entering one costs microseconds; values are often small): squares
    # may overflow (then the general path decides) and 0/0 below is expected.
    with np.errstate(all="ignore"):
        aa = np.dot(fa, fa)
        bb = np.dot(fb, fb)
        if not (math.isfinite(aa) and math.isfinite(bb)):
            return None  # non-finite values (or squares that overflow): counted exactly by the general path
        work = a.dtype.type
        diff = fa - fb
        np.abs(diff, out=diff)
        max_abs = float(diff.max())
        scale = np.abs(fb)
        if max_abs <= work(tol.atol):
            exceeds = False
        else:
            bound = scale * work(tol.rtol)
            bound += work(tol.atol)
            exceeds = bool(np.greater(diff, bound).any())
            del bound
        # What diff.mean(dtype=float64) computes (the same float64 sum, then one division), without
        # its Python-level wrapper.
        mean_abs = float(np.add.reduce(diff, dtype=np.float64) / diff.size)
        # |a-b|/|b|: where b is 0 the quotient is inf (a differs) or nan (0/0, which counts as 0).
        rel = np.divide(diff, scale, out=scale)
        max_rel = float(np.fmax.reduce(rel))
        if math.isnan(max_rel):
            max_rel = 0.0
        del diff, rel, scale
    cosine, layout = _cosine_and_layout(a, b, fa, fb, (aa, bb), max_abs, exceeds, tol)
    return ValueDiff(
        name,
        _dtype_name(a.dtype),
        a.shape,
        max_abs=max_abs,
        mean_abs=mean_abs,
        max_rel=max_rel,
        max_ulp=_finite_ulp(fa, fb),
        cosine=cosine,
        exceeds=exceeds,
        layout=layout,
    )


def _cosine_and_layout(
    a: np.ndarray, b: np.ndarray, fa: np.ndarray, fb: np.ndarray, squares: tuple[Any, Any], max_abs: float,
    exceeds: bool, tol: Tolerance,
) -> tuple[float, tuple[int, ...] | None]:
    norm = float(np.sqrt(float(squares[0]) * float(squares[1])))
    cosine = float(np.dot(fa, fb) / norm) if norm > 0 else (1.0 if max_abs == 0 else 0.0)
    layout = None
    # A flipped layout scrambles values (cosine far from 1); rounding noise does not. Only the
    # former is worth the permutation search.
    if exceeds and cosine < 0.999:
        from sealtrace.parity.layout import find_permutation

        layout = find_permutation(a, b, tol)
    return min(1.0, cosine), layout


def _finite_ulp(fa: np.ndarray, fb: np.ndarray) -> int:
    """ulp_distance for finite, flat float32/float64 arrays, without its int64 copies.

    Where the signs agree, the difference of the raw integer views is the distance and cannot
    overflow; where they differ (usually values around zero), the distance is the sum of the
    magnitudes, taken in Python integers on just those elements.
    """
    itype = _ULP_INT[fa.dtype.itemsize]
    ia, ib = fa.view(itype), fb.view(itype)
    signs = np.bitwise_xor(ia, ib)
    mixed = np.flatnonzero(signs < 0) if signs.min() < 0 else None
    np.subtract(ia, ib, out=signs)  # wraps only where the signs differ
    if mixed is not None:
        signs[mixed] = 0
    distance = max(int(signs.max()), -int(signs.min()))
    if mixed is not None:
        if fa.dtype.itemsize == 8:
            return ulp_distance(fa, fb)  # float64 magnitudes overflow int64: the general rule decides
        magnitude = np.iinfo(itype).max
        across = (ia[mixed] & magnitude).astype(np.int64) + (ib[mixed] & magnitude).astype(np.int64)
        distance = max(distance, int(across.max()))
    return distance


_DTYPE_NAMES: dict[np.dtype[Any], str] = {}


def _dtype_name(dtype: np.dtype[Any]) -> str:
    # str(dtype) costs microseconds; parity asks for it for every value.
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES.setdefault(dtype, str(dtype))
    return name


def _compare_floats_general(name: str, a: np.ndarray, b: np.ndarray, tol: Tolerance) -> ValueDiff:
    if a.size and np.array_equal(a, b, equal_nan=True):
        return _equal_floats(name, a)
    # Work in the values' own precision where it is float32 or float64 (a float64 copy of every
    # tensor doubled parity's memory and time); sums accumulate in float64.
    work = a.dtype if a.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    fa = np.asarray(a, dtype=work).reshape(-1)
    fb = np.asarray(b, dtype=work).reshape(-1)
    if a.dtype.kind == "c":
        fa, fb = np.abs(a).reshape(-1).astype(np.float64), np.abs(b).reshape(-1).astype(np.float64)
    finite_a, finite_b = np.isfinite(fa), np.isfinite(fb)
    nan_mismatch = inf_mismatch = 0
    if not (finite_a.all() and finite_b.all()):
        nan_mismatch = int(np.count_nonzero(np.isnan(fa) != np.isnan(fb)))
        inf_a, inf_b = np.isinf(fa), np.isinf(fb)
        inf_mismatch = int(np.count_nonzero((inf_a != inf_b) | (inf_a & inf_b & (np.sign(fa) != np.sign(fb)))))
        finite = finite_a & finite_b
        fa, fb = fa[finite], fb[finite]
    if fa.size == 0:
        return ValueDiff(name, str(a.dtype), a.shape, nan_mismatch=nan_mismatch, inf_mismatch=inf_mismatch,
                         exceeds=bool(nan_mismatch or inf_mismatch))
    diff = fa - fb
    np.abs(diff, out=diff)
    max_abs = float(diff.max())
    scale = np.abs(fb)
    bound = scale * work.type(tol.rtol)
    bound += work.type(tol.atol)
    exceeds = bool(nan_mismatch or inf_mismatch or np.greater(diff, bound).any())
    del bound
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / scale
    rel[scale == 0] = 0.0
    rel[(scale == 0) & (diff > 0)] = np.inf
    cosine, layout = _cosine_and_layout(a, b, fa, fb, (np.dot(fa, fa), np.dot(fb, fb)), max_abs, exceeds, tol)
    return ValueDiff(
        name,
        str(a.dtype),
        a.shape,
        max_abs=max_abs,
        mean_abs=float(diff.mean(dtype=np.float64)),
        max_rel=float(rel.max()),
        max_ulp=ulp_distance(a, b) if a.dtype.kind == "f" else None,
        cosine=cosine,
        nan_mismatch=nan_mismatch,
        inf_mismatch=inf_mismatch,
        exceeds=exceeds,
        layout=layout,
    )


def _compare_sequences(name: str, a: Any, b: Any, tol: Tolerance) -> ValueDiff:
    if not (isinstance(a, list) and isinstance(b, list)):
        return ValueDiff(name, "sequence", None, exceeds=True, shape_mismatch="sequence on one side only")
    if len(a) != len(b):
        return ValueDiff(name, "sequence", None, exceeds=True, shape_mismatch=f"length {len(a)} vs {len(b)}")
    worst = ValueDiff(name, "sequence", (len(a),))
    for x, y in zip(a, b, strict=True):
        d = compare_values(name, x, y, tol)
        if d.exceeds or d.max_abs > worst.max_abs:
            worst = ValueDiff(name, "sequence", (len(a),), max_abs=d.max_abs, mean_abs=d.mean_abs,
                              max_rel=d.max_rel, max_ulp=d.max_ulp, cosine=d.cosine, exceeds=worst.exceeds or d.exceeds)
    return worst


def within(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> bool:
    """True when a and b have one shape and agree within ``tol`` (NaNs equal)."""
    return a.shape == b.shape and bool(np.allclose(a, b, atol=tol.atol, rtol=tol.rtol, equal_nan=True))
