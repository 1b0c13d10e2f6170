"""`make bench`: run every benchmark script and assemble BENCHMARKS.md from their results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def main() -> None:
    scripts = sorted(p for p in HERE.glob("bench_*.py"))
    for script in scripts:
        print(f"== {script.name}", flush=True)
        subprocess.run([sys.executable, str(script)], check=False)
    sections = [p.read_text() for p in sorted((HERE / "results").glob("*.md"))]
    intro = (
        "# Benchmarks\n\nAll figures measured on the machine described in each section with `make bench` "
        "(or the per-script command named there). These machines are shared and noisy: medians and ratios "
        "measured side by side in one run are what to compare.\n\n"
    )
    (ROOT / "BENCHMARKS.md").write_text(intro + "\n".join(sections))
    print(f"wrote {ROOT / 'BENCHMARKS.md'}")


if __name__ == "__main__":
    main()
