"""Layout detection: does a permutation of axes (NCHW <-> NHWC, (B,C,T) <-> (B,T,C) ...) explain a difference?"""

from __future__ import annotations

import itertools

import numpy as np

from sealtrace.parity.tolerance import Tolerance, within

MAX_RANK = 5
# Checked first: the flips exporters and runtimes actually make.
_COMMON: dict[int, list[tuple[int, ...]]] = {
    3: [(0, 2, 1)],
    4: [(0, 2, 3, 1), (0, 3, 1, 2)],
    5: [(0, 2, 3, 4, 1), (0, 4, 1, 2, 3)],
}


def find_permutation(a: np.ndarray, b: np.ndarray, tol: Tolerance) -> tuple[int, ...] | None:
    """A non-identity permutation ``p`` with ``b.transpose(p) ~= a``, or None.

    Only ranks 2..5 are tried; candidates are filtered by shape before any value is compared.
    """
    if a.ndim != b.ndim or not 2 <= a.ndim <= MAX_RANK or a.size != b.size or a.size == 0:
        return None
    if a.dtype.kind not in "fiub" or b.dtype.kind not in "fiub":
        return None
    identity = tuple(range(a.ndim))
    candidates = list(_COMMON.get(a.ndim, []))
    candidates += [p for p in itertools.permutations(identity) if p not in candidates and p != identity]
    for perm in candidates:
        if tuple(b.shape[i] for i in perm) != a.shape:
            continue
        flipped = b.transpose(perm)
        # Cheap rejection on a strided sample before the full comparison.
        step = max(1, a.size // 257)
        if not within(a.reshape(-1)[::step], np.ascontiguousarray(flipped).reshape(-1)[::step], tol):
            continue
        if within(a, flipped, tol):
            return perm
    return None
