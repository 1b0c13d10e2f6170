"""How far apart two values are: the metrics every parity and diff report uses."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from sealtrace.parity.layout import find_permutation
from sealtrace.parity.tolerance import Tolerance


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
_INT_MIN = {size: int(np.iinfo(itype).min) for size, itype in _ULP_INT.items()}


def ulp_distance(a: np.ndarray, b: np.ndarray) -> int:
    """Largest number of representable floats between a and b, elementwise (non-finite ignored;
    +0.0 and -0.0 are 0 apart)."""
    itype = _ULP_INT.get(a.dtype.itemsize)
    if itype is None or a.dtype.kind != "f":
        return 0
    finite = (np.isfinite(a) & np.isfinite(b)).reshape(-1)
    if not finite.any():
        return 0
    fa, fb = a.reshape(-1), b.reshape(-1)
    return _finite_ulp(fa, fb) if finite.all() else _finite_ulp(fa[finite], fb[finite])


def compare_values(name: str, a: Any, b: Any, tol: Tolerance, quiet: bool = False) -> ValueDiff:
    """Compare value ``a`` (backend A) with ``b`` (backend B); sequences compare element by element.
    ``quiet``: the caller has floating-point warnings off already (np.errstate)."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray:
        if isinstance(a, list) or isinstance(b, list):
            return _compare_sequences(name, a, b, tol)
        if isinstance(a, Mapping) or isinstance(b, Mapping):
            return _compare_maps(name, a, b, tol)
        if a is None or b is None:
            exceeds = (a is None) != (b is None)
            return ValueDiff(
                name, "none", None, exceeds=exceeds, shape_mismatch="missing on one side" if exceeds else None
            )
        a = np.asarray(a)
        b = np.asarray(b)
    if a.dtype != b.dtype:
        return ValueDiff(name, _dtype_name(a.dtype), a.shape, dtype_mismatch=f"{a.dtype} vs {b.dtype}", exceeds=True)
    if a.shape != b.shape:
        layout = find_permutation(a, b, tol)
        return ValueDiff(
            name, _dtype_name(a.dtype), a.shape, shape_mismatch=f"{list(a.shape)} vs {list(b.shape)}", exceeds=True,
            layout=layout,
        )
    kind = a.dtype.kind
    if kind == "f" or kind == "c" or kind == "V":
        return _compare_floats(name, a, b, tol, quiet)
    if kind in "iub":
        # Equal bytes are equal integers: the figures below are then all zero.
        if a.size <= BYTES_CHECK and a.tobytes() == b.tobytes():
            return _make_diff(name, _dtype_name(a.dtype), a.shape, 0.0, 0.0, 0.0, None, None, False, None)
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.size else np.zeros(0)
        max_abs = float(diff.max()) if diff.size else 0.0
        return ValueDiff(name, _dtype_name(a.dtype), a.shape, max_abs=max_abs,
                         mean_abs=float(diff.mean()) if diff.size else 0.0, max_ulp=None, exceeds=max_abs > 0)
    equal = bool(np.array_equal(a, b))
    return ValueDiff(name, _dtype_name(a.dtype), a.shape, exceeds=not equal, max_abs=0.0 if equal else math.inf)


_FIELDS = tuple(f.name for f in fields(ValueDiff))


def _make_diff(
    name: str, dtype: str, shape: tuple[int, ...], max_abs: float, mean_abs: float, max_rel: float,
    max_ulp: int | None, cosine: float | None, exceeds: bool, layout: tuple[int, ...] | None,
) -> ValueDiff:
    """ValueDiff(...) with no mismatch, at a third of the cost of the frozen dataclass's __init__
    (parity makes one per compared value)."""
    diff: ValueDiff = object.__new__(ValueDiff)
    diff.__dict__.update(
        name=name, dtype=dtype, shape=shape, max_abs=max_abs, mean_abs=mean_abs, max_rel=max_rel, max_ulp=max_ulp,
        cosine=cosine, nan_mismatch=0, inf_mismatch=0, shape_mismatch=None, dtype_mismatch=None, exceeds=exceeds,
        layout=layout,
    )
    return diff


def identical_diff(name: str, a: np.ndarray) -> ValueDiff:
    """What compare_values gives for ``a`` and an array of its dtype, shape and bytes; ``a`` is a
    non-empty array of a bool, integer or float dtype."""
    if a.dtype.kind == "f":
        return _equal_floats(name, a)
    return _make_diff(name, _dtype_name(a.dtype), a.shape, 0.0, 0.0, 0.0, None, None, False, None)


def _equal_floats(name: str, a: np.ndarray) -> ValueDiff:
    return _make_diff(name, _dtype_name(a.dtype), a.shape, 0.0, 0.0, 0.0, 0 if a.dtype.kind == "f" else None, 1.0,
                      False, None)


# Up to this many elements, equality is tested on the bytes (a copy and a memcmp: cheaper than an
# elementwise comparison up to about here).
BYTES_CHECK = 16384
# Above this many elements, 17 evenly spaced elements are compared first: values that differ (as
# they do after the first rounding difference) skip the full equality pass.
_SAMPLES = 16
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _compare_floats(name: str, a: np.ndarray, b: np.ndarray, tol: Tolerance, quiet: bool = False) -> ValueDiff:
    # Equal values are the common case (shape and indexing steps, most local re-runs): equal bytes
    # are equal values (NaNs included, which the general path would reach too); otherwise a plain
    # elementwise == (equal_nan=True costs ten times more, so it is left to the general path, which
    # reaches the same answer when NaNs are all that made the check fail).
    size = a.size
    if not size:
        return _compare_floats_general(name, a, b, tol)
    fast = a.dtype == _F32 or a.dtype == _F64
    fa = fb = None
    if a.dtype.kind == "V":  # bytes may differ where values are equal, and the reverse: values only
        unchecked = False
    elif size <= BYTES_CHECK:
        if a.tobytes() == b.tobytes():
            return _equal_floats(name, a)
        # Different bytes can still be equal values (-0.0 vs +0.0): the fast path finds out when its
        # largest difference is 0; other dtypes test it here.
        unchecked = fast
    else:
        unchecked = False
        if fast:
            fa = a.reshape(-1)
            fb = b.reshape(-1)
            step = size // _SAMPLES
            unchecked = fa[::step].tobytes() != fb[::step].tobytes()
    if not unchecked and bool((a == b).all()):  # np.array_equal's test, without its checks (shapes agree)
        return _equal_floats(name, a)
    if fast:
        result = _compare_finite(name, a, b, tol, fa, fb, unchecked, quiet)
        if result is not None:
            return result
    return _compare_floats_general(name, a, b, tol)


def _compare_finite(
    name: str, a: np.ndarray, b: np.ndarray, tol: Tolerance, fa: np.ndarray | None = None,
    fb: np.ndarray | None = None, unchecked: bool = False, quiet: bool = False,
) -> ValueDiff | None:
    """The general path's figures, bit for bit, for float32/float64 values with no NaN or Inf
    (None otherwise), in about half of the passes over memory. ``fa``/``fb``: a and b flattened, if
    the caller has them; ``unchecked``: whether a == b everywhere is still to be tested (then equal
    values give _equal_floats's figures).

    The sums of squares for the cosine double as the finiteness check: a sum of non-negative terms
    is finite only if every term is; so no difference overflows. The largest difference and the
    largest relative one come from one reduction over both; the elementwise tolerance test is
    skipped when even the largest difference is within atol (every bound is at least atol), and
    otherwise made only where the difference exceeds atol.
    """
    if fa is None or fb is None:
        fa = a.reshape(-1)
        fb = b.reshape(-1)
    size = fa.size
    if size == 0:
        return None
    if quiet:
        return _finite_figures(name, a, b, tol, fa, fb, unchecked)
    # One errstate for the lot (entering one costs a microsecond; values are often small): squares
    # may overflow (then the general path decides) and 0/0 is expected.
    with np.errstate(all="ignore"):
        return _finite_figures(name, a, b, tol, fa, fb, unchecked)


def _finite_figures(
    name: str, a: np.ndarray, b: np.ndarray, tol: Tolerance, fa: np.ndarray, fb: np.ndarray, unchecked: bool
) -> ValueDiff | None:
    if fa.size > CHUNK:
        return _finite_figures_chunked(name, a, b, tol, fa, fb, unchecked)
    aa = np.dot(fa, fa)
    bb = np.dot(fb, fb)
    if not (math.isfinite(aa) and math.isfinite(bb)):
        return None  # non-finite values (or squares that overflow): counted exactly by the general path
    size = fa.size
    work = a.dtype.type
    # Row 0: |a - b|; row 1: |a - b| / |b| (inf where b is 0 and a is not, nan for 0/0, which
    # counts as 0), taken as |(|a - b| / b)|: division rounds the same whatever the signs.
    rows = np.empty((2, size), a.dtype)
    diff = rows[0]
    rel = rows[1]
    np.subtract(fa, fb, out=diff)
    np.abs(diff, out=diff)
    np.divide(diff, fb, out=rel)
    if size <= BYTES_CHECK:
        np.abs(rel, out=rel)
        max_abs, max_rel = np.fmax.reduce(rows, axis=1).tolist()
    else:  # large: two reductions instead of a pass that writes
        max_abs, max_rel = np.fmax.reduce(rows, axis=1).tolist()
        low = float(np.fmin.reduce(rel))
        max_rel = max(max_rel, -low) + 0.0  # + 0.0: -0.0 becomes 0.0, as |x| would give
    if max_abs == 0.0 and unchecked and bool((fa == fb).all()):
        return _equal_floats(name, a)
    if math.isnan(max_rel):
        max_rel = 0.0
    atol = work(tol.atol)
    if max_abs <= atol:
        exceeds = False
    elif tol.rtol >= 0:
        # Only where |a - b| > atol can it exceed its bound (atol + rtol * |b| >= atol).
        where = np.flatnonzero(diff > atol)
        bound = np.abs(fb[where])
        bound *= work(tol.rtol)
        bound += atol
        exceeds = bool(np.greater(diff[where], bound).any())
        del bound, where
    else:
        bound = np.abs(fb)
        bound *= work(tol.rtol)
        bound += atol
        exceeds = bool(np.greater(diff, bound).any())
        del bound
    # What diff.mean(dtype=float64) computes (the same float64 sum, then one division), without
    # its Python-level wrapper.
    mean_abs = float(np.add.reduce(diff, dtype=np.float64) / size)
    del diff, rel
    # max_rel < 1: no element has a and b of opposite signs except where both are zero (an
    # opposite sign makes |a - b| >= |b|), which _finite_ulp can tell from the raw difference.
    max_ulp = _finite_ulp(fa, fb, rows, max_rel < 1.0)
    del rows
    norm = math.sqrt(float(aa) * float(bb))
    cosine = float(np.dot(fa, fb) / norm) if norm > 0 else (1.0 if max_abs == 0 else 0.0)
    layout = None
    # A flipped layout scrambles values (cosine far from 1); rounding noise does not. Only the
    # former is worth the permutation search.
    if exceeds and cosine < 0.999:
        layout = find_permutation(a, b, tol)
    return _make_diff(name, _dtype_name(a.dtype), a.shape, max_abs, mean_abs, max_rel, max_ulp, min(1.0, cosine),
                      exceeds, layout)


# Values of more elements than this are compared chunk by chunk (_finite_figures_chunked): the
# temporaries are then those of one chunk (3 MiB of float32), not twice the value, and each chunk's
# passes run in cache. A multiple of 8192 (NumPy's buffer for a float64 sum of float32).
CHUNK = 1 << 18


def _finite_figures_chunked(
    name: str, a: np.ndarray, b: np.ndarray, tol: Tolerance, fa: np.ndarray, fb: np.ndarray, unchecked: bool
) -> ValueDiff | None:
    """_finite_figures for values of more than CHUNK elements, a chunk at a time: the same maxima,
    tolerance test and ULP distance (exact, elementwise); the float64 sums of the mean and the
    cosine's dot products are added chunk by chunk, so they may differ from one whole-array sum in
    their last bits (the cosine is then taken in float64)."""
    size = fa.size
    work = a.dtype.type
    atol = work(tol.atol)
    rtol = work(tol.rtol)
    rows = np.empty((2, CHUNK), a.dtype)
    aa = bb = ab = total = 0.0
    max_abs = 0.0
    high = low = math.nan
    exceeds = False
    max_ulp = 0
    for start in range(0, size, CHUNK):
        ca = fa[start : start + CHUNK]
        cb = fb[start : start + CHUNK]
        n = ca.size
        squares_a = float(np.dot(ca, ca))
        squares_b = float(np.dot(cb, cb))
        if not (math.isfinite(squares_a) and math.isfinite(squares_b)):
            return None  # non-finite values (or squares that overflow): counted exactly by the general path
        aa += squares_a
        bb += squares_b
        ab += float(np.dot(ca, cb))
        chunk = rows[:, :n]
        diff = chunk[0]
        rel = chunk[1]
        np.subtract(ca, cb, out=diff)
        np.abs(diff, out=diff)
        np.divide(diff, cb, out=rel)
        part_abs, part_high = np.fmax.reduce(chunk, axis=1).tolist()
        part_low = float(np.fmin.reduce(rel))
        max_abs = max(max_abs, part_abs)
        # fmax/fmin semantics across chunks: a chunk of 0/0 only (NaN) does not hide another's figure.
        high = part_high if math.isnan(high) else (high if math.isnan(part_high) else max(high, part_high))
        low = part_low if math.isnan(low) else (low if math.isnan(part_low) else min(low, part_low))
        if not exceeds and part_abs > atol:
            if tol.rtol >= 0:
                where = np.flatnonzero(diff > atol)
                bound = np.abs(cb[where])
                bound *= rtol
                bound += atol
                exceeds = bool(np.greater(diff[where], bound).any())
            else:
                bound = np.abs(cb)
                bound *= rtol
                bound += atol
                exceeds = bool(np.greater(diff, bound).any())
            del bound
        total = float(np.add.reduce(diff, dtype=np.float64, initial=total))
        # Within a chunk whose relative difference stays under 1, signs agree (see _finite_figures).
        chunk_rel = max(part_high, -part_low) if not (math.isnan(part_high) or math.isnan(part_low)) else math.nan
        max_ulp = max(max_ulp, _finite_ulp(ca, cb, rows, chunk_rel < 1.0))
    del rows
    max_rel = max(high, -low) + 0.0 if not (math.isnan(high) or math.isnan(low)) else 0.0
    if max_abs == 0.0 and unchecked and bool((fa == fb).all()):
        return _equal_floats(name, a)
    mean_abs = total / size
    norm = math.sqrt(aa * bb)
    cosine = ab / norm if norm > 0 else (1.0 if max_abs == 0 else 0.0)
    layout = None
    if exceeds and cosine < 0.999:
        layout = find_permutation(a, b, tol)
    return _make_diff(name, _dtype_name(a.dtype), a.shape, max_abs, mean_abs, max_rel, max_ulp, min(1.0, cosine),
                      exceeds, layout)


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
        layout = find_permutation(a, b, tol)
    return min(1.0, cosine), layout


def _finite_ulp(fa: np.ndarray, fb: np.ndarray, scratch: np.ndarray | None = None, same_signs: bool = False) -> int:
    """ulp_distance for finite, flat float arrays (float16/32/64), in place of int64 copies.

    Where the signs agree, the difference of the raw integer views is the distance and cannot
    overflow; where they differ (usually values around zero), the distance is the sum of the
    magnitudes, taken in uint64 on just those elements (two float64 magnitudes exceed int64). ``same_signs``: the signs are
    known to agree wherever either value is non-zero; a +0.0/-0.0 pair (distance 0) is then the
    only way to get the most negative integer as a difference. ``scratch``: any writable array of
    at least fa.nbytes contiguous bytes, reused for the differences.
    """
    itype = _ULP_INT[fa.dtype.itemsize]
    ia, ib = fa.view(itype), fb.view(itype)
    work = np.empty(ia.size, itype) if scratch is None else scratch.reshape(-1).view(itype)[: ia.size]
    if same_signs:
        np.subtract(ia, ib, out=work)
        low = int(np.minimum.reduce(work))
        if low != _INT_MIN[fa.dtype.itemsize]:
            return max(int(np.maximum.reduce(work)), -low)
    signs = np.bitwise_xor(ia, ib, out=work)
    mixed = np.flatnonzero(signs < 0) if np.minimum.reduce(signs) < 0 else None
    np.subtract(ia, ib, out=signs)  # wraps only where the signs differ
    if mixed is not None:
        signs[mixed] = 0
    distance = max(int(np.maximum.reduce(signs)), -int(np.minimum.reduce(signs)))
    if mixed is not None:
        magnitude = itype(np.iinfo(itype).max)
        across = (ia[mixed] & magnitude).astype(np.uint64) + (ib[mixed] & magnitude).astype(np.uint64)
        distance = max(distance, int(across.max()))
    return distance


_DTYPE_NAMES: dict[int, tuple[np.dtype[Any], str]] = {}


def _dtype_name(dtype: np.dtype[Any]) -> str:
    # str(dtype) costs microseconds, and so does hashing a dtype; parity asks for it for every value.
    # Keyed by identity (the entry holds the dtype, so its id is not reused while cached): arrays
    # of one built-in type share one dtype object.
    entry = _DTYPE_NAMES.get(id(dtype))
    if entry is not None and entry[0] is dtype:
        return entry[1]
    name = str(dtype)
    if len(_DTYPE_NAMES) < 256:
        _DTYPE_NAMES[id(dtype)] = (dtype, name)
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
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        d = compare_values(name, x, y, tol)
        if d.exceeds or d.max_abs > worst.max_abs:
            # The first element's shape, dtype or key mismatch is kept, named by its index.
            mismatch = worst.shape_mismatch or (d.shape_mismatch and f"element {i}: {d.shape_mismatch}")
            dtype_mismatch = worst.dtype_mismatch or (d.dtype_mismatch and f"element {i}: {d.dtype_mismatch}")
            worst = ValueDiff(name, "sequence", (len(a),), max_abs=d.max_abs, mean_abs=d.mean_abs,
                              max_rel=d.max_rel, max_ulp=d.max_ulp, cosine=d.cosine, shape_mismatch=mismatch,
                              dtype_mismatch=dtype_mismatch, exceeds=worst.exceeds or d.exceeds)
    return worst


def _compare_maps(name: str, a: Any, b: Any, tol: Tolerance) -> ValueDiff:
    """Two maps (ZipMap's class -> score): the same keys, then their values compared as arrays in key
    order."""
    if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
        return ValueDiff(name, "map", None, exceeds=True, shape_mismatch="map on one side only")
    if set(a) != set(b):
        return ValueDiff(name, "map", (len(a),), exceeds=True,
                         shape_mismatch=f"keys differ: {sorted(map(str, set(a) ^ set(b)))[:5]}")
    keys = sorted(a, key=str)
    values_a, values_b = np.asarray([a[k] for k in keys]), np.asarray([b[k] for k in keys])
    # ZipMap's scores are float32 handed over as Python floats: compared as float32 when that is
    # exact on both sides, so ULP distances count float32 steps.
    if values_a.dtype == values_b.dtype == np.float64:
        narrow_a, narrow_b = values_a.astype(np.float32), values_b.astype(np.float32)
        if (narrow_a == values_a).all() and (narrow_b == values_b).all():
            values_a, values_b = narrow_a, narrow_b
    diff = compare_values(name, values_a, values_b, tol)
    return dataclasses.replace(diff, dtype="map", shape=(len(keys),))
