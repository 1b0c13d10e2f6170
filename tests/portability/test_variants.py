"""The same runs under the kernels, thread counts and NumPy versions other machines would use.

Each variant runs every case (the real models and ACAS Xu networks, and every case of ONNX's node
test suite the reference runs, tests/portability/runs.py) in a child process whose environment
makes NumPy and OpenBLAS pick what another CPU would pick: OpenBLAS's kernels for other
microarchitectures (OPENBLAS_CORETYPE), NumPy's dispatch without its AVX-512 (X86_V4) or AVX2
(X86_V3) loops (NPY_DISABLE_CPU_FEATURES), other BLAS thread counts, and NumPy 1.26 in a second
environment (`make` builds .venv-numpy1). Every case's run digest must equal this process's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.portability.runs import run_cases, write_cases

ROOT = Path(__file__).resolve().parents[2]
NUMPY1_PYTHON = ROOT / ".venv-numpy1" / "bin" / "python"

# NumPy's dispatch targets a variant leaves out (a name this NumPy does not dispatch is dropped:
# NumPy 1.26 calls them AVX512_SKX ..., NumPy 2.x groups them as X86_V3, X86_V4).
WITHOUT_AVX512 = ("X86_V4", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "AVX512_ICL", "AVX512_SPR")
WITHOUT_AVX2 = ("X86_V3", "AVX2", "FMA3", *WITHOUT_AVX512)

VARIANTS: dict[str, dict[str, str]] = {
    "openblas-haswell": {"OPENBLAS_CORETYPE": "Haswell"},
    "openblas-skylakex": {"OPENBLAS_CORETYPE": "SkylakeX"},
    "openblas-sandybridge": {"OPENBLAS_CORETYPE": "Sandybridge"},
    "openblas-prescott": {"OPENBLAS_CORETYPE": "Prescott"},
    "numpy-without-avx512": {"NPY_DISABLE_CPU_FEATURES": " ".join(WITHOUT_AVX512)},
    "numpy-without-avx2": {"NPY_DISABLE_CPU_FEATURES": " ".join(WITHOUT_AVX2)},
    "blas-1-thread": {"OPENBLAS_NUM_THREADS": "1"},
    "blas-2-threads": {"OPENBLAS_NUM_THREADS": "2"},
    "blas-4-threads": {"OPENBLAS_NUM_THREADS": "4"},
}


def _dispatched(names: str) -> str:
    """The names NumPy of this environment dispatches to (it refuses to disable unknown ones)."""
    from numpy._core._multiarray_umath import __cpu_dispatch__

    return " ".join(name for name in names.split() if name in __cpu_dispatch__)


@pytest.fixture(scope="session")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """Every case written once per test process, and its run digests here."""
    directory = tmp_path_factory.mktemp("portability-cases")
    names = write_cases(directory)
    if os.environ.get("CI"):
        real = [n for n in names if not n.startswith("node/")]
        assert len(real) >= 10 + 45, f"CI must run every real model and ACAS Xu network, found {real}"
    digests = run_cases(directory)
    # a case that fails here would only be compared by its exception's name elsewhere
    failing = [name for name, digest in digests.items() if digest.startswith("error: ")]
    assert not failing, f"{len(failing)} case(s) fail to run here: {failing[:10]}"
    return directory, digests


def _run_elsewhere(python: str, directory: Path, env: dict[str, str]) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    environment.update(env)
    environment.setdefault("OPENBLAS_NUM_THREADS", "1")
    done = subprocess.run(
        [python, "-m", "tests.portability.runs", str(directory)],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def _differences(here: dict[str, str], there: dict[str, str]) -> list[str]:
    return [name for name in here if here[name] != there.get(name)]


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_case_is_bit_identical_under(variant: str, cases: tuple[Path, dict[str, str]]) -> None:
    directory, here = cases
    env = dict(VARIANTS[variant])
    if "NPY_DISABLE_CPU_FEATURES" in env:
        env["NPY_DISABLE_CPU_FEATURES"] = _dispatched(env["NPY_DISABLE_CPU_FEATURES"])
    there = _run_elsewhere(sys.executable, directory, env)
    differing = _differences(here, there)
    assert not differing, f"{len(differing)} of {len(here)} case(s) differ under {variant}: {differing[:10]}"


@pytest.mark.slow
def test_every_case_is_bit_identical_with_numpy_1_26(cases: tuple[Path, dict[str, str]]) -> None:
    if not NUMPY1_PYTHON.exists():
        message = f"{NUMPY1_PYTHON} not found (`make test` builds it: NumPy 1.26 beside this NumPy)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    version = subprocess.run(
        [str(NUMPY1_PYTHON), "-c", "import numpy; print(numpy.__version__)"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert version.startswith("1.26"), version
    directory, here = cases
    there = _run_elsewhere(str(NUMPY1_PYTHON), directory, {})
    differing = _differences(here, there)
    assert not differing, f"{len(differing)} of {len(here)} case(s) differ with NumPy {version}: {differing[:10]}"
