"""`make demo` runs end to end on the real model, tells the whole story, and reads at 80 columns (the
width of its output when piped)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sealtrace import zoo
from tests.conftest import require_material

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo.py"


@pytest.mark.slow
def test_demo_runs(tmp_path: Path) -> None:
    require_material(lambda: zoo.model("mobilenetv3-orientation").inputs())
    piped = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([sys.executable, str(DEMO)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False, env=piped)
    # The demo checks each command's exit code itself (0, or 1 for the tampered copy) and exits 1 otherwise.
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    wide = [line for line in out.splitlines() if len(line) > 80]
    assert not wide, wide
    flat = " ".join(out.split())  # phrases may be wrapped across lines
    for phrase in ("predicted 0 deg (upright) on both", "signed by trusted key", "chain intact",
                   "signature valid", "steps compared", "demo complete"):
        assert phrase in flat, phrase
    # The tampered copy is refused by verify and by run, each naming the tensor that was flipped.
    victim = re.search(r"inside tensor '([^']+)'", flat)
    assert victim is not None
    refusal = f"out/demo/tampered.seal: integrity check failed, 1 mismatch(es): tensor '{victim[1]}'"
    assert flat.count(refusal) == 2
    assert (tmp_path / "out" / "demo" / "parity.html").is_file()
