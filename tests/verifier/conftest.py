"""The Go verifier, built once per test session, and the material the agreement corpus derives from."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.verifier.corpus import Material, build_verifier, make_material


@pytest.fixture(scope="session")
def sealverify(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``go build`` of verifier/ (CI must have Go: .ci/run installs Debian's golang-go)."""
    if shutil.which("go") is None:
        message = "the Go toolchain is not installed (Debian/Ubuntu: apt-get install golang-go); the Go verifier is not built"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        return build_verifier(tmp_path_factory.mktemp("sealverify"))
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"go build failed:\n{exc.stderr}")


@pytest.fixture(scope="session")
def material(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return make_material(tmp_path_factory.mktemp("corpus") / "material")
