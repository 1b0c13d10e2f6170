"""The benchmark scripts and `make acasxu` where material is missing, tampered with or unreachable:
a message that says what and how, a non-zero exit, and nothing committed overwritten."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sealtrace import zoo
from tests.conftest import require_material

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
FETCH = BENCHMARKS / "acasxu" / "fetch.py"
SKIPPED = 4  # benchmarks/material.py


def run(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, **env})


@pytest.mark.parametrize("script", ["bench_falsify", "bench_reference", "bench_audit"])
def test_benchmark_without_acasxu_skips_and_writes_nothing(script: str, tmp_path: Path) -> None:
    empty = tmp_path / "acasxu"
    empty.mkdir()
    out = tmp_path / "results.md"
    args = ["--out", out] if script != "bench_reference" else []
    results = BENCHMARKS / "results" / "reference.md"
    before = results.read_bytes()
    done = run(BENCHMARKS / f"{script}.py", *args, SEALTRACE_ACASXU_DIR=str(empty))
    assert done.returncode == SKIPPED, done.stderr
    assert f"{script}: skipped" in done.stderr and "make acasxu" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists()
    assert results.read_bytes() == before


def test_fetch_verifies_the_real_copy() -> None:
    folder = require_material(zoo.acasxu_instances).parent
    done = run(FETCH, "--check", "--dir", folder)
    assert done.returncode == 0, done.stderr
    assert "56 files" in done.stdout and "match" in done.stdout


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    """A local mirror of the pinned folder (a copy of the real files, where this machine has them)."""
    source = require_material(zoo.acasxu_instances).parent
    folder = tmp_path / "mirror"
    shutil.copytree(source, folder)
    return folder


def test_fetch_downloads_what_is_missing_and_checks_it(mirror: Path, tmp_path: Path) -> None:
    target = tmp_path / "acasxu"
    target.mkdir()
    shutil.copy(mirror / "prop_1.vnnlib", target)  # one already there: verified, not downloaded again
    done = run(FETCH, "--dir", target, "--url", mirror.as_uri())
    assert done.returncode == 0, done.stderr
    assert "(55 downloaded)" in done.stdout
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [*zoo.ACASXU_NETWORKS, *zoo.ACASXU_PROPERTIES, zoo.ACASXU_INSTANCES]
    )
    assert run(FETCH, "--check", "--dir", target).returncode == 0


def test_fetch_refuses_a_download_that_differs_and_leaves_no_partial_set(mirror: Path, tmp_path: Path) -> None:
    tampered = mirror / "ACASXU_run2a_3_3_batch_2000.onnx"
    data = bytearray(tampered.read_bytes())
    data[-1] ^= 1
    tampered.write_bytes(bytes(data))
    target = tmp_path / "acasxu"
    done = run(FETCH, "--dir", target, "--url", mirror.as_uri())
    assert done.returncode == 1
    assert "ACASXU_run2a_3_3_batch_2000.onnx: sha256" in done.stderr
    assert list(target.iterdir()) == []


def test_fetch_reports_a_local_file_that_differs_and_keeps_it(mirror: Path) -> None:
    tampered = mirror / "prop_2.vnnlib"
    tampered.write_text(tampered.read_text() + "\n")
    kept = tampered.read_bytes()
    done = run(FETCH, "--dir", mirror, "--url", mirror.as_uri())
    assert done.returncode == 1
    assert "differ from the pinned sha256 (prop_2.vnnlib)" in done.stderr
    assert tampered.read_bytes() == kept


def test_fetch_offline_fails_in_one_line(tmp_path: Path) -> None:
    done = run(FETCH, "--dir", tmp_path / "acasxu", "--url", (tmp_path / "unreachable").as_uri())
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fetch.py: error: cannot download ")
    assert not any((tmp_path / "acasxu").iterdir())
