"""Portable numerics: the one place where the reference backend rounds.

Every rounding-sensitive primitive of the reference lives here: the float formats and their
rounding, sums of products (MatMul, Gemm, Conv's products, Einsum), reductions, elementwise
functions (exp, log, tanh, sigmoid, erf, pow ...) and the composites built on them (softmax,
log-softmax, log-sum-exp). Kernels, specializers, parity's local re-runs and the torch bridge's
constant folding call these and never NumPy's float reductions, BLAS products or transcendental
ufuncs directly. Exact IEEE operations (+ - * /, sqrt, comparisons, where) stay plain NumPy in
the kernels: they are correctly rounded on every machine already.

Each result is defined by docs/numerics.md as a function of the op's inputs, attributes and the
specification version (``SPEC_VERSION``) alone: a correctly rounded value, or a fixed sequence of
them. So the bits do not depend on the CPU, the BLAS, its thread count or NumPy's version. The
``native`` mode (``numerics_mode``) calls NumPy and the BLAS directly instead; it is faster and
host-dependent, and never the default.
"""

from __future__ import annotations

from sealtrace.ops.numerics.composites import log_softmax, reduce_log_sum_exp, softmax
from sealtrace.ops.numerics.formats import (
    BFLOAT16,
    FLOAT16,
    FLOAT32,
    FLOAT64,
    FloatFormat,
    canonical_nan_value,
    canonical_nans,
    format_of,
    is_float,
    round_to,
    round_to_narrow,
)
from sealtrace.ops.numerics.functions import FUNCTIONS, apply, power, unit_circle, ziv
from sealtrace.ops.numerics.mode import (
    MODES,
    NATIVE,
    PORTABLE,
    SPEC_VERSION,
    check_mode,
    current_mode,
    is_native,
    numerics_mode,
)
from sealtrace.ops.numerics.products import (
    determinant,
    einsum,
    gemm,
    matmul,
    matmul_shape,
    prepared_rows,
    product,
)
from sealtrace.ops.numerics.reductions import (
    mean_square,
    reduce_l1,
    reduce_l2,
    reduce_mean,
    reduce_prod,
    reduce_sum,
    reduce_sum_square,
)

__all__ = [
    "BFLOAT16",
    "FLOAT16",
    "FLOAT32",
    "FLOAT64",
    "FUNCTIONS",
    "MODES",
    "NATIVE",
    "PORTABLE",
    "SPEC_VERSION",
    "FloatFormat",
    "apply",
    "canonical_nan_value",
    "canonical_nans",
    "check_mode",
    "current_mode",
    "determinant",
    "einsum",
    "format_of",
    "gemm",
    "is_float",
    "is_native",
    "log_softmax",
    "matmul",
    "matmul_shape",
    "mean_square",
    "numerics_mode",
    "power",
    "prepared_rows",
    "product",
    "reduce_l1",
    "reduce_l2",
    "reduce_log_sum_exp",
    "reduce_mean",
    "reduce_prod",
    "reduce_sum",
    "reduce_sum_square",
    "round_to",
    "round_to_narrow",
    "softmax",
    "unit_circle",
    "ziv",
]
