"""`make demo` runs end to end on the real model and tells the whole story."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sealtrace import zoo
from tests.conftest import require_material

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


@pytest.mark.slow
def test_demo_runs(tmp_path: Path) -> None:
    require_material(lambda: zoo.model("mobilenetv3-orientation").path)
    wide = {**os.environ, "COLUMNS": "250"}  # no line wrapping inside the phrases checked below
    done = subprocess.run([sys.executable, str(DEMO)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False, env=wide)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    for phrase in ("predicted 0 deg (upright) on both", "integrity check failed", "mismatch(es): tensor '",
                   "chain intact", "signature valid", "steps compared", "demo complete"):
        assert phrase in out, phrase
    assert (tmp_path / "out" / "demo" / "parity.html").is_file()
