"""From an approximation with an error bound to the correctly rounded result (Ziv's rounding test).

Every primitive first computes a float64 approximation ``y`` of each exact result ``v`` together with
a rigorous bound ``err >= |y - v|``, in whatever order NumPy, the BLAS and the CPU choose: the bound
holds for any order. When no rounding boundary of the target format lies in [y - err, y + err],
RN(y - err) and RN(y + err) are the same value, and so is RN(v): that value is the result, whatever
the machine. The rare elements whose interval holds a boundary take an exact path:

1. ``pairwise_sums``, then ``accurate_sums``: the terms of an undecided sum are re-added in a
   fixed pairwise tree, whose bound is log2(K) rather than K roundings; then the same tree with
   each addition's error kept (TwoSum); what is still undecided (exact cancellations) by Rump, Ogita
   and Oishi's error-free extraction, whose partial sums are exact in any order; the bound shrinks to
   about 2**-104 of the largest term, and the test runs again.
2. ``exact_sums`` / ``exact_apply``: what is still undecided is computed by MPFR (gmpy2), whose
   operations are correctly rounded: sums in a precision wide enough to be exact, and the last
   operation rounded once into the target format.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import gmpy2
import numpy as np

from sealtrace.ops.numerics.formats import BFLOAT16, FloatFormat, round_to

Array = np.ndarray[Any, Any]

# The unit roundoff of float64.
U = 2.0**-53
# Bounds computed in float64 are themselves rounded: every bound is widened by this factor, which
# covers the relative error of any bound formula here (at most a few thousand roundings of 2**-53).
WIDEN = 1.0 + 2.0**-20

Exact = Callable[[Array], Sequence[float] | Array]


class Counts:
    """How many elements the rounding test settled and how many it handed to an exact path: what
    benchmarks/bench_numerics.py reports as the share of elements that took the exact path. Plain
    counters, process-wide (a benchmark reads them around one run)."""

    rounded = 0  # elements through a first rounding test
    undecided = 0  # of those, handed to an exact path
    mpfr = 0  # elements computed by MPFR in the end

    @classmethod
    def reset(cls) -> None:
        cls.rounded = cls.undecided = cls.mpfr = 0




# The rounding test computes y - err and y + err in float64, which rounds them too: err is widened by
# ROUNDING_SLACK of itself and of |y| (each rounding is at most 2**-53 of |y| + err), so that the
# computed ends still enclose [y - err, y + err]. It also keeps a y that lies exactly on a rounding
# boundary of the target with a tiny nonzero err from passing the test.
ROUNDING_SLACK = 2.0**-50
# Elements of one block of the rounding test: its float64 temporaries stay in a core's cache (the
# test is a few passes over the block; over a whole large tensor each pass would go to memory).
BLOCK = 1 << 14


def settle(
    y: Array, err: Array | float, fmt: FloatFormat, exact: Exact, relative: bool = False, count: bool = True
) -> Array:
    """RN(v) in ``fmt`` for each element, given float64 ``y`` with ``|y - v| <= err`` (with
    ``relative``: ``|y - v| <= err * |y|``).

    ``err`` is a scalar, an array of y's shape, or of y's shape with a last axis of 1 (one bound
    per row). Elements where RN(y - err) and RN(y + err) differ (compared bit for bit, so -0 and
    +0 differ) are handed to ``exact`` as flat indices; it returns their correctly rounded values.
    A non-finite ``y`` is taken as the result (the callers make sure it is the right one); a
    finite ``y`` must come with a bound that is not NaN. ``count``: a first test (see Counts), not
    a second one on the undecided elements of another.
    """
    if y.size == 0:
        return np.empty(y.shape, dtype=fmt.dtype)
    if y.size <= BLOCK and fmt is not BFLOAT16:
        # one block, in a handful of NumPy calls (small tensors: the calls are the cost)
        if count:
            exact = _counted(exact, y.size)
        with np.errstate(invalid="ignore", over="ignore"):
            lo, hi = _ends(y, err, relative, True)
            low, high = lo.astype(fmt.dtype), hi.astype(fmt.dtype)
            out = y.astype(fmt.dtype)
        low_bits, high_bits = low.view(fmt.bits), high.view(fmt.bits)
        if not np.array_equal(low_bits, high_bits):
            index = np.flatnonzero(low_bits != high_bits)
            out.reshape(-1)[index] = exact(index)
        return out
    if count:
        exact = _counted(exact, y.size)
    cols = y.shape[-1] if y.ndim else 1
    y2 = y.reshape(-1, cols)
    if np.ndim(err) == 0:
        return _settle_rows(y2, lambda start, stop: err, fmt, exact, relative).reshape(y.shape)
    e2 = np.reshape(err, (y2.shape[0], -1))
    return _settle_rows(y2, lambda start, stop: e2[start:stop], fmt, exact, relative).reshape(y.shape)


def settle_outer(y: Array, rows: Array, cols: Array, fmt: FloatFormat, exact: Exact) -> Array:
    """``settle`` for y [G, M, N] with the bound rows[g, m] * cols[g, n] (``cols`` [1, N] for all
    groups alike), made a cache-sized block at a time rather than as a whole array.

    The bound is used as it is: it must already cover the rounding of y -+ err, which a bound of
    (K + 3) u S does for a sum of K terms when S >= sum|terms| (docs/numerics.md, section 7: the
    float64 rounding of y - err is at most u (|y| + err), and |y| <= (1 + (K + 1) u) S)."""
    groups, m, n = y.shape
    if y.size == 0:
        return np.empty(y.shape, dtype=fmt.dtype)
    exact = _counted(exact, y.size)
    y2 = y.reshape(groups * m, n)
    row2 = rows.reshape(groups * m, 1)

    def bound(start: int, stop: int) -> Array:
        if cols.shape[0] == 1:
            return row2[start:stop] * cols[0]
        first, last = start // m, (stop - 1) // m
        if first == last:
            return row2[start:stop] * cols[first]
        # a block over several groups (depthwise convolutions: one row per group): each row
        # with its group's column factors
        return row2[start:stop] * cols[np.arange(start, stop) // m]

    return _settle_rows(y2, bound, fmt, exact, False, widen=False).reshape(y.shape)


def _settle_rows(
    y2: Array,
    bound: Callable[[int, int], Array | float],
    fmt: FloatFormat,
    exact: Exact,
    relative: bool,
    widen: bool = True,
) -> Array:
    """The rounding test of ``settle`` over [rows, cols] ``y2``, a block of rows at a time, with
    ``bound(start, stop)`` the bound of rows start:stop."""
    rows, cols = y2.shape
    out = np.empty(y2.shape, dtype=fmt.dtype)
    if y2.size == 0:
        return out
    step = max(1, BLOCK // max(cols, 1))
    size = min(rows, step) * cols
    low = np.empty(size, dtype=np.float64)
    high = np.empty(size, dtype=np.float64)
    hard_parts = []
    with np.errstate(invalid="ignore", over="ignore"):
        start = 0
        while start < rows:
            stop = min(rows, start + step)
            yb = y2[start:stop]
            eb = bound(start, stop)
            lo = low[: yb.size].reshape(yb.shape)
            hi = high[: yb.size].reshape(yb.shape)
            _ends(yb, eb, relative, widen, lo, hi)
            _round_into(out[start:stop], yb, fmt)
            hard = _rounded_bits(lo, fmt) != _rounded_bits(hi, fmt)
            index = np.flatnonzero(hard)
            if index.size:
                hard_parts.append(index + start * cols)
            start = stop
    if hard_parts:
        index = np.concatenate(hard_parts)
        out.reshape(-1)[index] = exact(index)
    return out


def _counted(exact: Exact, size: int) -> Exact:
    """``exact``, counted in Counts as a first test of ``size`` elements."""
    Counts.rounded += size

    def run(index: Array) -> Sequence[float] | Array:
        Counts.undecided += index.size
        return exact(index)

    return run


def _ends(
    y: Array, err: Array | float, relative: bool, widen: bool, lo: Array | None = None, hi: Array | None = None
) -> tuple[Array, Array]:
    """The ends y - err and y + err of the interval the rounding test rounds (into ``lo`` and ``hi``
    when given). They are rounded themselves; the bound is widened to cover that (ROUNDING_SLACK),
    except where the caller's bound already does (``widen`` False, settle_outer)."""
    if lo is None or hi is None:
        lo, hi = np.empty(y.shape), np.empty(y.shape)
    if relative:
        np.multiply(y, 1.0 - (err + ROUNDING_SLACK), out=lo)
        np.multiply(y, 1.0 + (err + ROUNDING_SLACK), out=hi)
    elif widen:
        np.abs(y, out=hi)
        hi *= ROUNDING_SLACK
        hi += np.multiply(err, 1.0 + ROUNDING_SLACK)
        np.subtract(y, hi, out=lo)
        np.add(y, hi, out=hi)
    else:
        np.subtract(y, err, out=lo)
        np.add(y, err, out=hi)
    return lo, hi


def _round_into(out: Array, y: Array, fmt: FloatFormat) -> None:
    """out[...] = RN(y) in ``fmt``."""
    if fmt is BFLOAT16:
        out[...] = round_to(y, fmt)
    else:
        out[...] = y  # the hardware's (or NumPy's float16) conversion: round to nearest even


def _rounded_bits(y: Array, fmt: FloatFormat) -> Array:
    """The bits of RN(y) in ``fmt`` (inside the caller's np.errstate: overflow to infinity is quiet)."""
    rounded = round_to(y, fmt) if fmt is BFLOAT16 else y.astype(fmt.dtype)
    return rounded.view(fmt.bits)


def two_sum(a: Array, b: Array) -> tuple[Array, Array]:
    """Knuth's TwoSum: s = fl(a + b) and the exact error e, a + b = s + e (in any IEEE arithmetic)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _extraction_shift(count: int) -> int:
    """log2 of the factor by which the extraction constant exceeds the largest term: 2**M >= count + 2."""
    return max(1, math.ceil(math.log2(count + 2)))


def accurate_sums(terms: Array) -> tuple[Array, Array]:
    """Row sums of ``terms`` ([rows, count], float64, each term exact) with a rigorous error bound.

    Two levels of ExtractVector (Rump, Ogita, Oishi, "Accurate floating-point summation", 2008):
    with sigma a power of two at least 2**M times the largest term, q = (sigma + p) - sigma and
    p - q are exact, and the q of a row sum exactly in any order. The first level leaves terms below
    2**-53 sigma, the second below 2**-106 sigma; those are added plainly. The partial results are
    combined with TwoSum, whose exact errors enter the bound, so a row whose remainder is zero and
    whose combination is exact gets a bound of zero (an exact tie then rounds to even, undecided by
    nothing).
    """
    count = terms.shape[1]
    shift = _extraction_shift(count)
    rest = np.array(terms, dtype=np.float64)  # worked on in place
    q = np.empty_like(rest)
    parts = []
    for _ in range(2):
        top = np.maximum(np.max(rest, axis=1), -np.min(rest, axis=1))
        _, exponent = np.frexp(top)  # top < 2**exponent
        sigma = np.ldexp(1.0, exponent + shift)[:, None]
        sigma[top == 0] = 0.0
        np.add(rest, sigma, out=q)
        q -= sigma
        rest -= q
        parts.append(np.sum(q, axis=1))  # exact, in any order
    remainder = np.sum(rest, axis=1)
    remainder_err = np.sum(np.abs(rest, out=q), axis=1) * (count * U * WIDEN)
    high, low = parts
    t, e1 = two_sum(low, remainder)
    s, e2 = two_sum(high, t)
    err = remainder_err + np.abs(e1) + np.abs(e2)
    return s, err


def pairwise_sums(terms: Array, compensated: bool = True) -> tuple[Array, Array]:
    """Row sums of ``terms`` ([rows, count], float64, each term exact) in a fixed pairwise tree:
    halves added elementwise, log2(count) levels.

    Plain: Higham's bound for the tree, (ceil(log2 count) + 1) u sum|terms|, where a sum in an
    unknown order needs (count + 1) u sum|terms|: a pass or two for a bound 100 times tighter.
    Compensated: each addition's rounding error kept exactly by TwoSum and the errors added back; the
    result's error is that of adding the (tiny) errors, about u^2 log2(count)^2 sum|terms|, and
    exactly zero when no addition rounded (terms that cancel exactly, an STFT's symmetric frames, are
    decided here)."""
    rows, count = terms.shape
    width = 1 << max(0, (count - 1).bit_length())
    if width == count:
        level = terms
    else:
        level = np.zeros((rows, width))
        level[:, :count] = terms
    magnitude = np.sum(np.abs(terms), axis=1)
    if not compensated:
        depth = 0
        while width > 1:
            width //= 2
            level = level[:, :width] + level[:, width:]
            depth += 1
        return level[:, 0] + 0.0, magnitude * ((depth + 1) * U * WIDEN)
    errors = np.zeros(rows)
    error_magnitude = np.zeros(rows)
    additions = 0
    while width > 1:
        width //= 2
        level, e = two_sum(level[:, :width], level[:, width:])
        errors += np.sum(e, axis=1)
        error_magnitude += np.sum(np.abs(e), axis=1)
        additions += width
    total = level[:, 0] + errors
    # the errors' sum: additions roundings of at most u sum|e|; the last addition: u |total|
    err = (error_magnitude * ((additions + 1) * U) + np.abs(total) * U) * WIDEN
    return total + 0.0, err


def _exact_precision(row: Sequence[float]) -> int:
    """A precision (bits) in which the sum of ``row``'s float64 terms is exact."""
    exponents = [math.frexp(v)[1] for v in row if v != 0.0 and math.isfinite(v)]
    if not exponents:
        return 64
    return max(exponents) - min(exponents) + 53 + max(1, len(row)).bit_length() + 2


def exact_apply(
    rows: Iterable[Sequence[float]], fmt: FloatFormat, finish: Callable[[Any], Any] | None = None
) -> list[float]:
    """For each row of float64 terms: their exact sum S (MPFR, wide enough to be exact), then
    ``finish(S)`` computed in ``fmt``'s MPFR context, which rounds once into ``fmt``
    (``finish`` None: S itself rounded)."""
    values: list[float] = []
    for row in rows:
        Counts.mpfr += 1
        with gmpy2.context(precision=_exact_precision(row)):
            total = gmpy2.fsum(row)
        with fmt.context:
            values.append(float(finish(total) if finish is not None else +total))
    return values


def exact_sums(rows: Iterable[Sequence[float]], fmt: FloatFormat) -> list[float]:
    """RN of the exact sum of each row of float64 terms, in ``fmt`` (MPFR's correctly rounded sum)."""
    values: list[float] = []
    with fmt.context:
        for row in rows:
            Counts.mpfr += 1
            values.append(float(gmpy2.fsum(row)))
    return values


def settle_sums(
    y: Array,
    err: Array | float | tuple[Array, Array],
    fmt: FloatFormat,
    terms_of: Callable[[Array], Array],
) -> Array:
    """``settle`` for sums: the undecided elements' terms (``terms_of(flat indices)`` -> [n, count]
    float64, exact) are added again with a bound from their own magnitudes (the first bound is
    usually a coarser one, shared by a row); those still undecided are re-added by error-free
    extraction, and what that leaves undecided is summed by MPFR."""

    def exact(index: Array) -> Array:
        terms = terms_of(index)
        s, e = pairwise_sums(terms, compensated=False)

        def compensated(again: Array) -> Array:
            rest = terms[again]
            # sums whose sign the bound leaves open are mostly exact cancellations (an STFT's
            # symmetric frames), which only extraction decides: they skip the compensated tree
            near_zero = np.abs(s[again]) <= e[again]
            values = np.empty(again.size)
            if near_zero.any():
                values[near_zero] = _accurate(rest[near_zero], fmt)
            if not near_zero.all():
                other = rest[~near_zero]
                s2, e2 = pairwise_sums(other)
                values[~near_zero] = settle(
                    s2, e2, fmt, lambda last: _accurate(other[last], fmt), count=False
                ).astype(np.float64)
            return values

        return settle(s, e, fmt, compensated, count=False).astype(np.float64)

    if isinstance(err, tuple):
        return settle_outer(y, err[0], err[1], fmt, exact)
    return settle(y, err, fmt, exact)


def _accurate(terms: Array, fmt: FloatFormat) -> Array:
    s, e = accurate_sums(terms)
    return settle(s, e, fmt, lambda again: exact_sums(terms[again].tolist(), fmt), count=False).astype(np.float64)
