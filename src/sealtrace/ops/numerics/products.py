"""Sums of products: MatMul, Gemm, Conv (through its im2col matrices) and Einsum, correctly rounded.

The result of each output element is RN(sum of its products, plus its addend), one rounding into the
inputs' format (docs/numerics.md, "Sums of products"). For float16, bfloat16 and float32 inputs the
products are exact in float64, so a float64 GEMM in any order and on any number of threads is within
(K + 1) * 2**-53 * sum|a_k b_k| of the exact sum (Jeannerod and Rump's bound, which holds for every
summation order); Cauchy-Schwarz bounds sum|a_k b_k| by the row and column norms, at a cost of one
pass over each operand. ``settle_sums`` then rounds, and re-adds the terms of the few undecided
elements exactly. float64 inputs have no wider type to go to: their products are split exactly
(Dekker's TwoProduct) and every element is summed by ``math.fsum``, which is correctly rounded.
"""

from __future__ import annotations

import math
import string
import threading
import weakref
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import gmpy2
import numpy as np

from sealtrace.limits import check_allocation
from sealtrace.ops.numerics.formats import (
    BFLOAT16,
    FLOAT64,
    FloatFormat,
    canonical_nans,
    exact_in_float64,
    format_of,
)
from sealtrace.ops.numerics.mode import is_native
from sealtrace.ops.numerics.settle import WIDEN, Counts, U, exact_apply, settle_outer, settle_sums

Array = np.ndarray[Any, Any]


def _gamma(count: int) -> float:
    """The factor of sum|terms| that bounds a float64 sum of ``count`` exact terms in any order,
    (count + 1) u, plus 2 u for the rounding of y -+ err in the rounding test (settle_outer)."""
    return (count + 3) * U * WIDEN


def product(
    a: Array,
    b: Array,
    fmt: FloatFormat,
    addend: Array | None = None,
    alpha: float = 1.0,
    a_norms: Array | None = None,
    b_norms: Array | None = None,
) -> Array:
    """RN(alpha * a @ b + addend) in ``fmt``, element by element, for stacks of matrices.

    ``a`` [G or 1, M, K] and ``b`` [G or 1, K, N] hold values of ``fmt`` (in any float dtype that
    holds them exactly, float64 included); a stack of one is used for every matrix of the other.
    ``addend`` (values exact in float64, such as a bias or beta * C of narrow inputs) broadcasts to
    [G, M, N]. Returns [G, M, N] of ``fmt``. ``a_norms`` [G or 1, M] and ``b_norms`` [G or 1, N],
    when given, are upper bounds of the Euclidean norms of a's rows and b's columns (a caller that
    knows them more cheaply: a convolution's columns come from few input values).
    """
    groups = max(a.shape[0], b.shape[0])
    if fmt is FLOAT64 or not exact_in_float64(fmt):
        return _product_float64(_stacked(a, groups), _stacked(b, groups), addend, alpha)
    if groups == 1 and alpha == 1.0 and a.shape[1] * b.shape[2] <= SMALL_PRODUCT and fmt is not BFLOAT16:
        small = _small_product(a[0], b[0], fmt, addend, a_norms, b_norms)
        if small is not None:
            return small[None]
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    count = a64.shape[2]
    rows, cols = a64.shape[1], b64.shape[2]
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0: handled below
        y = np.dot(a64[0], b64[0])[None] if a64.shape[0] == b64.shape[0] == 1 else np.matmul(a64, b64)
    operations = 0
    if alpha != 1.0:
        y *= alpha
        operations += 1
    if addend is not None:
        y += addend
        operations += 1
    else:
        y += 0.0  # an exact zero is +0 (a BLAS may return -0 for it)
    if not math.isfinite(float(np.add.reduce(y, axis=None))):  # (finite products cannot overflow it)
        return _with_non_finite(_stacked(a64, groups), _stacked(b64, groups), y, fmt, addend, alpha)
    # Cauchy-Schwarz: sum_k |a_ik b_kj| <= ||a_i|| ||b_j||, the row norms of a times the column
    # norms of b, made block by block in the rounding test (never a whole array of bounds). With
    # alpha and an addend c: |alpha| sum|p| + |c| <= ||(alpha a_i, c_i)|| ||(b_j, 1)||, c_i the
    # largest |c| of row i, and the error is at most (K + 1 + 3) u of that. WIDEN covers the
    # roundings of the norms themselves.
    rows_bound = np.sqrt(np.einsum("gmk,gmk->gm", a64, a64)) if a_norms is None else a_norms
    cols_bound = np.sqrt(np.einsum("gkn,gkn->gn", b64, b64)) if b_norms is None else b_norms
    rows_bound = np.broadcast_to(rows_bound, (groups, rows))
    factor = _gamma(count)
    if operations:
        factor += 3 * U * WIDEN
        rows_bound = rows_bound * abs(alpha)
        if addend is not None:
            addend_top = np.max(np.abs(np.broadcast_to(addend, y.shape)), axis=2)
            rows_bound = np.sqrt(rows_bound * rows_bound + addend_top * addend_top)
            cols_bound = np.sqrt(cols_bound * cols_bound + 1.0)
    rows_bound = rows_bound * factor
    a_of = 0 if a64.shape[0] == 1 else None
    b_of = 0 if b64.shape[0] == 1 else None
    full_addend = None if addend is None else np.broadcast_to(np.asarray(addend, dtype=np.float64), y.shape)

    def positions(index: Array) -> tuple[Array, Array, Array]:
        g, rest = np.divmod(index, rows * cols)
        i, j = np.divmod(rest, cols)
        return g, i, j

    def terms_of(index: Array) -> Array:
        g, i, j = positions(index)
        products = a64[g if a_of is None else 0, i, :] * b64[g if b_of is None else 0, :, j]
        if full_addend is None:
            return products
        return np.concatenate([products, full_addend[g, i, j][:, None]], axis=1)

    bound = (rows_bound, cols_bound)
    if alpha == 1.0:
        return settle_sums(y, bound, fmt, terms_of)

    # alpha * (sum of products) + addend: the products of three values are not exact in float64,
    # so undecided elements go to MPFR directly (Gemm with alpha != 1 is rare).
    def exact(index: Array) -> list[float]:
        g, i, j = positions(index)
        products = (a64[g if a_of is None else 0, i, :] * b64[g if b_of is None else 0, :, j]).tolist()
        extras = [0.0] * index.size if full_addend is None else full_addend[g, i, j].tolist()
        values = []
        for row, extra in zip(products, extras, strict=True):
            values.extend(exact_apply([row], fmt, _scaled_plus(alpha, extra)))
        return values

    return settle_outer(y, rows_bound, cols_bound, fmt, exact)


# Products with at most this many outputs try _small_product first: on models of many small steps
# (a [1, 50] x [50, 50] layer) the NumPy calls are the cost, not the arithmetic.
SMALL_PRODUCT = 4096


def _small_product(
    a: Array, b: Array, fmt: FloatFormat, addend: Array | None, a_norms: Array | None, b_norms: Array | None
) -> Array | None:
    """``product`` of one small matrix pair in a few NumPy calls: the whole bound as one array, one
    rounding test. None when an element is undecided or not finite (the general path decides)."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.dot(a64, b64)
        rows = np.sqrt(np.einsum("mk,mk->m", a64, a64)) if a_norms is None else a_norms[0]
        cols = np.sqrt(np.einsum("kn,kn->n", b64, b64)) if b_norms is None else b_norms[0]
        if addend is None:
            y += 0.0  # an exact zero is +0
            factor = _gamma(a64.shape[1])
        else:
            y += addend[0]
            top = np.max(np.abs(np.broadcast_to(addend[0], y.shape)), axis=1)
            rows = np.sqrt(rows * rows + top * top)
            cols = np.sqrt(cols * cols + 1.0)
            factor = _gamma(a64.shape[1]) + 3 * U * WIDEN
        err = np.multiply.outer(rows * factor, cols)  # covers y -+ err's own rounding (_gamma)
        out = y.astype(fmt.dtype)
        low = (y - err).astype(fmt.dtype)
        high = (y + err).astype(fmt.dtype)
    if not np.array_equal(low.view(fmt.bits), high.view(fmt.bits)) or not np.isfinite(y).all():
        return None
    Counts.rounded += y.size
    return out


def _stacked(x: Array, groups: int) -> Array:
    """A stack of ``groups`` matrices: ``x`` itself, or its one matrix repeated (a view)."""
    return x if x.shape[0] == groups else np.broadcast_to(x, (groups, *x.shape[1:]))


def _scaled_plus(alpha: float, addend: float) -> Any:
    """finish(S) = alpha * S + addend, exact in a precision wide enough, rounded once at the end."""

    def finish(total: Any) -> Any:
        width = max(total.precision, 53) + 64 + 2200
        with gmpy2.context(precision=width):
            value = gmpy2.mpfr(alpha, 53) * total + gmpy2.mpfr(addend, 53)
        return +value

    return finish


def _with_non_finite(
    a64: Array, b64: Array, y: Array, fmt: FloatFormat, addend: Array | None, alpha: float
) -> Array:
    """A product some of whose inputs are infinite or NaN. Every element of a row of ``a`` (or a
    column of ``b``) holding one is infinite or NaN, by IEEE rules that do not depend on the order
    of the sum: those elements are recomputed without the BLAS (which may skip zero terms), NaN
    written canonically; the others are computed as usual."""
    bad_rows: Array = np.asarray(~np.isfinite(a64).all(axis=2))  # [G, M]
    bad_cols: Array = np.asarray(~np.isfinite(b64).all(axis=1))  # [G, N]
    clean_a = np.where(bad_rows[:, :, None], 0.0, a64)
    clean_b = np.where(bad_cols[:, None, :], 0.0, b64)
    clean_addend = None
    if addend is not None:
        full = np.broadcast_to(np.asarray(addend, dtype=np.float64), y.shape)
        clean_addend = np.where(np.isfinite(full), full, 0.0)
    out = product(clean_a, clean_b, fmt, clean_addend, alpha)
    affected = bad_rows[:, :, None] | bad_cols[:, None, :]
    if addend is not None:
        affected = affected | ~np.isfinite(np.broadcast_to(addend, y.shape))
    g, i, j = np.nonzero(affected)
    with np.errstate(invalid="ignore", over="ignore"):
        values = np.sum(a64[g, i, :] * b64[g, :, j], axis=1) * alpha
        if addend is not None:
            values = values + np.broadcast_to(addend, y.shape)[g, i, j]
    out[g, i, j] = values.astype(fmt.dtype) if fmt is not FLOAT64 else values
    return canonical_nans(out, fmt)


# float64: TwoProduct is exact while the products neither overflow nor lose bits below the smallest
# normal number; values outside this range go to MPFR instead.
_SPLITTABLE = (2.0**-480, 2.0**480)
_VELTKAMP = 2.0**27 + 1.0
# How many products one block of a float64 product holds in memory (16 bytes each, twice).
_FLOAT64_BLOCK = 1 << 21


def _split(x: Array) -> tuple[Array, Array]:
    """Veltkamp's split: x = hi + lo exactly, each with at most 26 significant bits."""
    c = x * _VELTKAMP
    hi = c - (c - x)
    return hi, x - hi


def _two_product(a: Array, b: Array) -> tuple[Array, Array]:
    """Dekker's TwoProduct: a * b = p + e exactly (for magnitudes within _SPLITTABLE)."""
    p = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    e = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, e


def _safe(x: Array) -> Array:
    """Which elements TwoProduct handles exactly: zero, or a magnitude within _SPLITTABLE."""
    magnitude = np.abs(x)
    return (magnitude == 0) | ((magnitude >= _SPLITTABLE[0]) & (magnitude <= _SPLITTABLE[1]))


def _product_float64(a: Array, b: Array, addend: Array | None, alpha: float) -> Array:
    """The float64 product: every element is math.fsum of the exact TwoProduct halves (and the
    addend), correctly rounded; elements with values TwoProduct cannot split, a non-finite value or
    an alpha go to MPFR."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    groups, rows, count = a64.shape
    cols = b64.shape[2]
    out = np.empty((groups, rows, cols), dtype=np.float64)
    full_addend = None if addend is None else np.broadcast_to(np.asarray(addend, dtype=np.float64), out.shape)
    row_safe: Array = np.asarray(_safe(a64).all(axis=2))
    col_safe: Array = np.asarray(_safe(b64).all(axis=1))
    step = max(1, _FLOAT64_BLOCK // max(count * cols, 1))
    for g in range(groups):
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            p, e = _two_product(a64[g, start:stop, :, None], b64[g, None, :, :])  # [rows, K, N]
            halves = np.concatenate([p, e], axis=1).transpose(0, 2, 1)  # [rows, N, 2K]
            for i in range(start, stop):
                for j in range(cols):
                    extra = 0.0 if full_addend is None else float(full_addend[g, i, j])
                    if alpha == 1.0 and row_safe[g, i] and col_safe[g, j] and math.isfinite(extra):
                        try:
                            out[g, i, j] = math.fsum([*halves[i - start, j].tolist(), extra])
                            continue
                        except OverflowError:
                            pass
                    out[g, i, j] = _exact_float64_element(a64[g, i], b64[g, :, j], alpha, extra)
    return canonical_nans(out + 0.0, FLOAT64)


def _exact_float64_element(row: Array, col: Array, alpha: float, addend: float) -> float:
    """One element of a float64 product by MPFR: IEEE's non-finite results, else RN of the exact value."""
    terms = row * col
    if not (np.isfinite(row).all() and np.isfinite(col).all() and math.isfinite(addend)):
        with np.errstate(invalid="ignore", over="ignore"):
            return float(np.sum(terms) * alpha + addend)
    with gmpy2.context(precision=4400):  # exact: float64 products span under 4300 bits
        total = gmpy2.fsum(gmpy2.mpfr(x, 53) * gmpy2.mpfr(w, 53) for x, w in zip(row.tolist(), col.tolist(), strict=True))
        value = gmpy2.mpfr(alpha, 53) * total + gmpy2.mpfr(addend, 53)
    with FLOAT64.context:
        return float(+value)


# ------------------------------------------------------------------------------------------------
# Native numerics: NumPy and the BLAS in the inputs' type (half precision computed in float32).


def _native_wide(x: Array) -> Array:
    return x.astype(np.float32) if x.dtype != np.float64 and x.dtype != np.float32 else x


def _native_matmul(a: Array, b: Array) -> Array:
    wa, wb = _native_wide(a), _native_wide(b)
    if wb.ndim == 2 and wa.ndim > 2 and wa.size and wa.flags.c_contiguous and wa.shape[-1] == wb.shape[0]:
        # a stack of rows times one matrix as a single GEMM: the weight is read once
        y = np.dot(wa.reshape(-1, wa.shape[-1]), wb).reshape(*wa.shape[:-1], wb.shape[1])
    else:
        y = np.matmul(wa, wb)
    return np.asarray(y).astype(a.dtype, copy=False)


def _native_gemm(a: Array, b: Array, c: Array | None, alpha: float, beta: float) -> Array:
    wa, wb = _native_wide(a), _native_wide(b)
    work = wa.dtype
    y = np.dot(wa, wb)
    if alpha != 1.0:
        y = y * work.type(alpha)
    if c is not None and beta != 0.0:
        wc = _native_wide(c)
        y = y + (wc * work.type(beta) if beta != 1.0 else wc)
    return np.asarray(y).astype(a.dtype, copy=False)


# ------------------------------------------------------------------------------------------------
# Weights prepared once

# A product of a few rows with a weight matrix would convert the whole matrix to float64 and
# measure its columns on every call; read-only matrices (a Plan's weights and folded constants)
# are prepared once and kept while they live, up to PREPARED_LIMIT bytes of float64 copies.
PREPARED_LIMIT = 1 << 30
_PREPARED: dict[tuple[Any, ...], tuple[weakref.ref[Array], Array, Array]] = {}
_PREPARED_LOCK = threading.Lock()
_prepared_bytes = 0
# Entries whose operand died. A weak reference's callback runs whenever the garbage collector does,
# in whatever thread allocated, possibly one that holds _PREPARED_LOCK already: waiting for the lock
# there would deadlock, so the callback queues the entry and removes it only if the lock is free;
# otherwise the lock's holder removes it before letting go.
_DEAD: deque[tuple[tuple[Any, ...], int]] = deque()


def _immutable(x: Any) -> bool:
    """Whether ``x``'s values can never change: it and every array it views are read-only, down
    to bytes (a weight decoded from its protobuf) or nothing."""
    while isinstance(x, np.ndarray):
        if x.flags.writeable:
            return False
        x = x.base
    return x is None or isinstance(x, bytes) or (isinstance(x, memoryview) and x.readonly)


def _columns(b: Array, transposed: bool) -> tuple[Array, Array | None]:
    """``b`` (or ``b.T``) as float64 [K, N] and its column norms (None: not prepared, measure it)."""
    return _prepared(b, transposed, -2)


def prepared_rows(a: Array) -> tuple[Array, Array | None]:
    """``a`` ([..., M, K]) as float64 and the norms of its rows ([..., M]), for ``product``'s
    ``a_norms``: made once for a read-only weight (a convolution's filters), else now (None: the
    norms are left to ``product``)."""
    return _prepared(a, False, -1)


def _prepared(b: Array, transposed: bool, axis: int) -> tuple[Array, Array | None]:
    """``b`` (or ``b.T``) as float64 and its norms along ``axis`` (None: not prepared). A view of a
    read-only weight (an LSTM's W[d], a slice of it) is recognized by the array that owns the
    memory, its offset, shape and strides."""
    matrix = b.T if transposed else b
    if not _immutable(b):
        return np.asarray(matrix, dtype=np.float64), None
    root = b
    while isinstance(root.base, np.ndarray):
        root = root.base
    offset = b.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    key = (id(root), offset, b.shape, b.strides, b.dtype.str, transposed, axis)
    with _PREPARED_LOCK:
        _drop_dead()
        entry = _PREPARED.get(key)
        if entry is not None and entry[0]() is root:
            return entry[1], entry[2]
    wide = np.asarray(matrix, dtype=np.float64)
    norms = np.sqrt(np.add.reduce(wide * wide, axis=axis))
    global _prepared_bytes
    with _PREPARED_LOCK:
        _drop_dead()
        if key not in _PREPARED and _prepared_bytes + wide.nbytes <= PREPARED_LIMIT:
            _prepared_bytes += wide.nbytes
            _PREPARED[key] = (weakref.ref(root, lambda _: _forget(key, wide.nbytes)), wide, norms)
        _drop_dead()
    return wide, norms


def _forget(key: tuple[Any, ...], nbytes: int) -> None:
    _DEAD.append((key, nbytes))
    if _PREPARED_LOCK.acquire(blocking=False):  # never wait for it here: see _DEAD
        try:
            _drop_dead()
        finally:
            _PREPARED_LOCK.release()


def _drop_dead() -> None:
    """Remove the entries of operands that died (the caller holds _PREPARED_LOCK)."""
    global _prepared_bytes
    while _DEAD:
        key, nbytes = _DEAD.popleft()
        entry = _PREPARED.get(key)
        if entry is not None and entry[0]() is None:
            del _PREPARED[key]
            _prepared_bytes -= nbytes


# ------------------------------------------------------------------------------------------------
# MatMul, Gemm


def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of numpy.matmul(a, b) (1-D operands promoted, batch dimensions broadcast), found
    without touching data; a ValueError naming both shapes where they do not align."""
    rows = a if len(a) > 1 else (1, *a)
    cols = b if len(b) > 1 else (*b, 1)
    if not a or not b or rows[-1] != cols[-2]:
        raise ValueError(f"MatMul: shapes {a} and {b} do not align")
    batch = rows[:-2] if rows[:-2] == cols[:-2] or not cols[:-2] else cols[:-2] if not rows[:-2] else None
    if batch is None:  # (np.broadcast_shapes costs more than a small product's other checks)
        batch = np.broadcast_shapes(rows[:-2], cols[:-2])
    return (*batch, *rows[-2:-1][: len(a) - 1], *cols[-1:][: len(b) - 1])


def matmul(a: Array, b: Array) -> Array:
    """ONNX MatMul: numpy.matmul's shapes (1-D operands promoted, batch dimensions broadcast), each
    element of a float result RN(sum_k a_k b_k) in the inputs' type; integers exactly as NumPy."""
    fmt = format_of(a.dtype)
    shape = matmul_shape(a.shape, b.shape)
    dtype = np.result_type(a, b)
    # Empty operands (a [2**40, 0] batch) may declare an output of any size: refused beyond the
    # budget before it exists, and an empty one made at once (NumPy would step through every
    # batch). One no larger than its operands is not checked: they exist already.
    if math.prod(shape) * dtype.itemsize > a.nbytes + b.nbytes:
        check_allocation(math.prod(shape) * dtype.itemsize, f"MatMul of shapes {a.shape} and {b.shape}")
    if math.prod(shape) == 0 or a.shape[-1] == 0:  # (an empty sum is +0)
        return np.zeros(shape, dtype)
    if fmt is None or b.dtype != a.dtype:
        return np.asarray(np.matmul(a, b))
    if is_native():
        return _native_matmul(a, b)
    squeeze_rows = a.ndim == 1
    squeeze_cols = b.ndim == 1
    a2 = a[None, :] if squeeze_rows else a
    b2 = b[:, None] if squeeze_cols else b
    if b2.ndim == 2:
        # every row of every matrix of a against one matrix: one product of stacked rows
        stacked = a2.reshape(1, -1, a2.shape[-1])
        columns, norms = _columns(b, False) if not squeeze_cols else (b2, None)
        y = product(stacked, columns[None], fmt, b_norms=None if norms is None else norms[None])
        y = y.reshape(*a2.shape[:-1], b2.shape[-1])
    else:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        a3 = np.broadcast_to(a2, (*batch, *a2.shape[-2:])).reshape(-1, *a2.shape[-2:])
        b3 = np.broadcast_to(b2, (*batch, *b2.shape[-2:])).reshape(-1, *b2.shape[-2:])
        y = product(a3, b3, fmt).reshape(*batch, a2.shape[-2], b2.shape[-1])
    if squeeze_rows:
        y = y[..., 0, :]
    if squeeze_cols:
        y = y[..., 0]
    return y if y.flags.c_contiguous else y.copy()  # (ascontiguousarray would make a scalar 1-D)


def gemm(
    a: Array, b: Array, c: Array | None, alpha: float, beta: float, trans_a: bool = False, trans_b: bool = False
) -> Array:
    """ONNX Gemm of 2-D ``a`` and ``b``, each transposed first if asked: each element
    RN(alpha * sum_k a_k b_k + beta * c), one rounding; integers exactly as NumPy."""
    fmt = format_of(a.dtype)
    weights = b
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    if a.shape[0] * b.shape[1] * a.dtype.itemsize > a.nbytes + b.nbytes:  # (as in matmul)
        check_allocation(a.shape[0] * b.shape[1] * a.dtype.itemsize, f"Gemm of shapes {a.shape} and {b.shape}")
    if fmt is not None and is_native():
        return _native_gemm(a, b, c, alpha, beta)
    if fmt is None:
        y = np.asarray(np.dot(a, b))
        if alpha != 1.0:
            y = (y * alpha).astype(a.dtype)
        if c is not None and beta != 0.0:
            y = (y + (c * beta if beta != 1.0 else c)).astype(a.dtype)
        return y
    addend = None
    if c is not None and beta != 0.0:
        c64 = np.asarray(c, dtype=np.float64)
        if beta != 1.0:
            if fmt is FLOAT64 or not exact_in_float64(fmt):
                c64 = c64 * beta  # float64 inputs: beta * C rounded once (docs/numerics.md)
            else:
                c64 = c64 * float(np.asarray(beta, dtype=fmt.dtype).astype(np.float64))
        addend = np.broadcast_to(c64, (a.shape[0], b.shape[1]))[None]
    scale = float(np.asarray(alpha, dtype=fmt.dtype).astype(np.float64)) if fmt is not FLOAT64 else alpha
    if fmt is FLOAT64 or not exact_in_float64(fmt):
        return product(a[None], b[None], fmt, addend, scale)[0]
    columns, norms = _columns(weights, trans_b)
    return product(a[None], columns[None], fmt, addend, scale, b_norms=None if norms is None else norms[None])[0]


# ------------------------------------------------------------------------------------------------
# Einsum


@dataclass(frozen=True)
class _Equation:
    """An einsum equation with its ellipses spelled out as letters, for one set of operand ranks."""

    inputs: tuple[str, ...]
    output: str

    @property
    def summed(self) -> str:
        """Labels that appear in the inputs but not in the output, in order of first appearance."""
        seen: list[str] = []
        for term in self.inputs:
            for label in term:
                if label not in self.output and label not in seen:
                    seen.append(label)
        return "".join(seen)

    def text(self, output: str | None = None) -> str:
        return ",".join(self.inputs) + "->" + (self.output if output is None else output)


@lru_cache(maxsize=256)
def _equation(equation: str, ranks: tuple[int, ...]) -> _Equation:
    text = equation.replace(" ", "")
    left, arrow, right = text.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"Einsum: equation {equation!r} has {len(terms)} operand(s), got {len(ranks)}")
    used = set(text) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    ellipsis_rank = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks, strict=True) if "..." in t), default=0)
    ellipsis = "".join(spare[:ellipsis_rank])
    spelled = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            own = rank - len(term.replace("...", ""))
            term = term.replace("...", ellipsis[ellipsis_rank - own :])
        if len(term) != rank:
            raise ValueError(f"Einsum: term {term!r} of {equation!r} does not match an operand of rank {rank}")
        spelled.append(term)
    if arrow:
        output = right.replace("...", ellipsis)
    else:  # implicit output: the ellipsis, then labels used once, in alphabetical order
        counts = {c: left.count(c) for c in used}
        output = ellipsis + "".join(sorted(c for c in used if counts[c] == 1))
    return _Equation(tuple(spelled), output)


def einsum(equation: str, *operands: Array) -> Array:
    """ONNX Einsum: each element of a float result RN(sum over the summed labels of the product of
    the operands' elements), one rounding; integers exactly as NumPy."""
    fmt = format_of(operands[0].dtype)
    eq = _equation(equation, tuple(op.ndim for op in operands))
    dims: dict[str, set[int]] = {}
    for term, op in zip(eq.inputs, operands, strict=True):
        for label, dim in zip(term, op.shape, strict=True):
            dims.setdefault(label, set()).add(dim)
    out_size = math.prod(max(dims[label] - {1}, default=1) for label in eq.output)  # (1 broadcasts)
    if out_size * operands[0].dtype.itemsize > sum(op.nbytes for op in operands):  # (as in matmul)
        check_allocation(out_size * operands[0].dtype.itemsize, f"Einsum {equation!r} of {[op.shape for op in operands]}")
    if fmt is None:
        return np.asarray(np.einsum(equation, *operands, optimize=True))
    if is_native():
        work = [_native_wide(op) for op in operands]
        return np.asarray(np.einsum(equation, *work, optimize=True)).astype(operands[0].dtype, copy=False)
    wide = [np.asarray(op, dtype=np.float64) for op in operands]
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.asarray(np.einsum(eq.text(), *wide, optimize=True), dtype=np.float64) + 0.0
    sizes = {label: dim for term, op in zip(eq.inputs, wide, strict=True) for label, dim in zip(term, op.shape, strict=True)}
    count = math.prod(sizes[label] for label in eq.summed)

    def terms_of(index: Array) -> Array:
        """The terms (products over the summed labels) of the elements at flat ``index``."""
        positions = np.unravel_index(index, y.shape) if y.ndim else ()
        fixed = dict(zip(eq.output, positions, strict=True))
        rows = []
        for n in range(index.size):
            sliced = [
                op[tuple(fixed[label][n] if label in fixed else slice(None) for label in term)]
                for term, op in zip(eq.inputs, wide, strict=True)
            ]
            kept = ["".join(label for label in term if label not in fixed) for term in eq.inputs]
            rows.append(np.einsum(",".join(kept) + "->" + eq.summed, *sliced).reshape(-1))
        return np.stack(rows) if rows else np.zeros((0, count))

    if not np.isfinite(y).all() or fmt is FLOAT64 or not exact_in_float64(fmt) or len(operands) > 2:
        return _einsum_exact(y, fmt, terms_of, count, eq, wide)
    bound = np.einsum(eq.text(), *[np.abs(op) for op in wide], optimize=True)
    err = np.asarray(bound, dtype=np.float64) * _gamma(count)
    return settle_sums(y, err, fmt, terms_of)


def _einsum_exact(y: Array, fmt: FloatFormat, terms_of: Any, count: int, eq: _Equation, wide: list[Array]) -> Array:
    """Einsum where the fast path does not apply (float64, three or more operands, non-finite
    values): products of more than two values are formed exactly by MPFR; non-finite results are
    IEEE's, which no summation order changes."""
    out = np.empty(y.shape, dtype=fmt.dtype)
    flat = out.reshape(-1)
    for n, value in enumerate(y.reshape(-1).tolist()):
        if not math.isfinite(value):
            flat[n] = value
            continue
        factors = _einsum_factors(np.array([n]), y.shape, eq, wide)
        with gmpy2.context(precision=4400 * len(eq.inputs)):
            total = gmpy2.fsum(math.prod((gmpy2.mpfr(f, 53) for f in term), start=gmpy2.mpfr(1)) for term in factors)
        with fmt.context:
            flat[n] = float(+total)
    return canonical_nans(out, fmt)


def _einsum_factors(index: Array, shape: tuple[int, ...], eq: _Equation, wide: list[Array]) -> list[list[float]]:
    """For the one element at flat ``index``: the factors of each of its terms, one row per point
    of the grid of summed labels."""
    positions = [int(p[0]) for p in np.unravel_index(index, shape)] if shape else []
    fixed = dict(zip(eq.output, positions, strict=True))
    sizes: dict[str, int] = {}
    views = []
    for term, op in zip(eq.inputs, wide, strict=True):
        sliced = op[tuple(fixed[label] if label in fixed else slice(None) for label in term)]
        kept = "".join(label for label in term if label not in fixed)
        labels = "".join(dict.fromkeys(kept))
        view = np.asarray(np.einsum(f"{kept}->{labels}", sliced)) if kept else np.asarray(sliced)
        sizes.update(zip(labels, view.shape, strict=True))
        views.append((labels, view))
    grid = [sizes[label] for label in eq.summed]
    columns = []
    for labels, view in views:
        for label in eq.summed:
            if label not in labels:
                view = view[..., None]
                labels += label
        order = [labels.index(label) for label in eq.summed]
        columns.append(np.broadcast_to(np.transpose(view, order), grid).reshape(-1))
    return np.stack(columns, axis=1).tolist()


# ------------------------------------------------------------------------------------------------
# Det


def determinant(x: Array) -> Array:
    """ONNX Det: RN(the exact determinant) of each trailing square matrix, computed in rationals
    (Gaussian elimination over exact fractions; Det is for small matrices). A matrix with an
    infinite or NaN entry gives NaN."""
    fmt = format_of(x.dtype)
    if fmt is None:
        raise TypeError(f"Det takes float16, bfloat16, float32 or float64, not {x.dtype}")
    if is_native():
        wide = _native_wide(x)
        return np.asarray(np.linalg.det(wide)).astype(x.dtype, copy=False)
    n = x.shape[-1]
    matrices = np.asarray(x, dtype=np.float64).reshape(-1, n, n)
    out = np.empty(matrices.shape[0], dtype=fmt.dtype)
    for index, matrix in enumerate(matrices):
        if not np.isfinite(matrix).all():
            out[index] = fmt.canonical_nan
            continue
        value = _exact_determinant([[gmpy2.mpq(v) for v in row] for row in matrix.tolist()])
        with fmt.context:
            out[index] = float(gmpy2.mpfr(value))
    return out.reshape(x.shape[:-2])


def _exact_determinant(rows: list[list[Any]]) -> Any:
    """The determinant of a matrix of exact rationals, by Gaussian elimination."""
    n = len(rows)
    sign = 1
    det = gmpy2.mpq(1)
    for col in range(n):
        pivot = next((r for r in range(col, n) if rows[r][col] != 0), None)
        if pivot is None:
            return gmpy2.mpq(0)
        if pivot != col:
            rows[col], rows[pivot] = rows[pivot], rows[col]
            sign = -sign
        head = rows[col][col]
        det *= head
        for r in range(col + 1, n):
            factor = rows[r][col] / head
            if factor:
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return det * sign
