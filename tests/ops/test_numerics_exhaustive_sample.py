"""A sample of `make exhaustive` (benchmarks/exhaustive_functions.py): for every float32 elementwise
function, 2**14 bit patterns spread over the whole 32-bit range plus the special values (zeros,
subnormals, infinities, NaNs, the neighbourhoods of overflow, underflow and saturation thresholds),
``numerics.apply`` against the independent MPFR oracle (benchmarks/exhaustive_oracle.c), bit for bit.

The oracle is compiled with the system's cc against GNU MPFR (Debian/Ubuntu: libmpfr-dev). Where either
is missing the tests skip, saying so; in CI (CI set), which installs libmpfr-dev, they fail instead.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from sealtrace.ops.numerics import FUNCTIONS

DRIVER = Path(__file__).resolve().parents[2] / "benchmarks" / "exhaustive_functions.py"
SAMPLE = 1 << 14


def _driver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("exhaustive_functions", DRIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("exhaustive_functions", module)
    spec.loader.exec_module(module)
    return module


driver = _driver()


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Any:
    try:
        library = driver.build_oracle(tmp_path_factory.mktemp("oracle"))
    except driver.OracleUnavailableError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the MPFR oracle cannot be built in CI (it must install libmpfr-dev): {exc}")
        pytest.skip(f"the MPFR oracle cannot be built: {exc}")
    return driver.Oracle(library)


# Thresholds where results saturate, overflow or underflow (exp, sinh/cosh, tanh, erf, sigmoid, softplus,
# gelu ...), values where functions are near their fixed points or poles, and the binade edges.
ANCHORS = [
    0.5, 1.0, 2.0, 0.75, 1.5, 3.0, 2.0**-12, 2.0**-24, 2.0**-126, 2.0**-140, 2.0**24, 2.0**63, 2.0**127,
    88.72283935546875, 89.4159851, 87.3365479, 103.278931, 103.972084, 9.01091290, 3.91920590, 16.6355324,
    15.9423847, 17.3286800, 10.0, 14.0, 14.5, 40.0, 104.0, 1.57079637, 3.14159274, 0.785398185, 1e4, 1e8,
    0.999999940, 1.00000012, 0.693147182, 0.5493061, 0.881373584, 1.3169579, 5.0, 20.0, 2.0**13, 2.0**17,
    2.0**25, 2.0**50,
]
NEIGHBOURS = 16


def special_bits() -> np.ndarray[Any, Any]:
    values = [
        0x00000000, 0x00000001, 0x00000002, 0x00000003, 0x007FFFFF, 0x00800000, 0x00800001, 0x7F7FFFFF,
        0x7F800000, 0x7F800001, 0x7FBFFFFF, 0x7FC00000, 0x7FFFFFFF,
    ]
    for a in ANCHORS:
        center = int(np.array([a], dtype=np.float32).view(np.uint32)[0])
        values += range(max(0, center - NEIGHBOURS), min(0x7F800000, center + NEIGHBOURS + 1))
    positive = np.unique(np.array(values, dtype=np.uint32))
    return np.concatenate([positive, positive | np.uint32(0x80000000)])


def sample_bits(name: str) -> np.ndarray[Any, Any]:
    """2**14 bit patterns, one in each 2**18-wide stretch of the 32-bit range (a fixed draw per function),
    and the special values."""
    rng = np.random.default_rng(sum(map(ord, name)))
    stride = (1 << 32) // SAMPLE
    spread = np.arange(SAMPLE, dtype=np.uint64) * stride + rng.integers(0, stride, SAMPLE, dtype=np.uint64)
    return np.concatenate([spread.astype(np.uint32), special_bits()])


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_float32_sample_matches_the_mpfr_oracle(oracle: Any, name: str) -> None:
    bits = sample_bits(name)
    theirs = oracle(name, bits, driver.PARAMETERS.get(name, ()))
    mine = driver.ours(name, bits)
    bad = driver.mismatches(mine, theirs)
    records = driver.mismatch_records(name, bits, mine, theirs, 5)
    assert bad.size == 0, f"{name}: {bad.size} of {bits.size} inputs differ from the oracle, e.g. {records}"


def test_the_oracle_on_known_values(oracle: Any) -> None:
    """The oracle itself, on values known independently of MPFR and of sealtrace."""

    def one(name: str, x: float, *parameters: float) -> int:
        bits = np.array([x], dtype=np.float32).view(np.uint32)
        return int(oracle(name, bits, parameters)[0])

    assert one("exp", 1.0) == 0x402DF854  # e = 2.71828182845904... -> 2.71828174591064453125
    assert one("exp", 0.0) == 0x3F800000
    assert one("exp", -np.inf) == 0x00000000
    assert one("exp", 89.0) == 0x7F800000  # e**89 > FLT_MAX
    assert one("exp", -104.0) == 0x00000000  # e**-104 < 2**-150: rounds to +0
    assert one("exp", -103.0) == 0x00000001  # 2**-149 * 1.32...: the smallest subnormal
    assert one("log", 2.0) == 0x3F317218  # ln 2 = 0.693147180559945... -> 0.693147182464599609375
    assert one("log", -0.0) == 0xFF800000
    assert one("softplus", 0.0) == 0x3F317218
    assert one("sigmoid", 0.0) == 0x3F000000
    assert one("sigmoid", -np.inf) == 0x00000000
    assert one("tanh", -0.0) == 0x80000000
    assert one("elu", -np.inf, 1.0) == 0xBF800000
    assert one("gelu", -0.0) == 0x80000000
    assert one("gelu", 2.0**-149) == 0x00000001  # 2**-150 + a little rounds up, away from the tie
    assert (one("gelu", -np.inf) & 0x7FFFFFFF) > 0x7F800000  # -inf * Phi(-inf) = -inf * 0: NaN
    with pytest.raises(ValueError, match="no function"):
        oracle("nope", np.zeros(1, dtype=np.uint32))


def test_mismatches_treat_nans_alike_and_zeros_apart() -> None:
    a = np.array([0x7FC00000, 0xFFC00001, 0x00000000, 0x3F800000], dtype=np.uint32)
    b = np.array([0x7F800001, 0x7FC00000, 0x80000000, 0x3F800000], dtype=np.uint32)
    assert driver.mismatches(a, b).tolist() == [2]
