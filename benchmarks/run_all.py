"""`make bench`: run every benchmark script and assemble BENCHMARKS.md from their results.

    python benchmarks/run_all.py                  # run everything (bench_falsify alone takes ~25 min)
    python benchmarks/run_all.py --assemble-only  # rebuild BENCHMARKS.md from benchmarks/results/
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from material import SKIPPED  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)

ORDER = ("reference", "executors", "numerics", "portability_arm64", "exhaustive_functions", "container", "graph-index", "manifest", "incremental-sign", "audit", "parity", "parity-scale", "torch", "tvm", "falsify", "vnnlib",
         "serve", "ledger", "scale", "verifier", "replay", "fuzz", "fuzz-http")

INTRO = """# Benchmarks

Every figure below was measured with the command named in its section (all of them: `make bench`), on the
machine described there. These machines are shared (other jobs ran beside these measurements) and noisy:
compare medians and ratios measured side by side in one run. Each section states the issue's target next to
what was measured; where a target is missed, the section says so and why.
"""


def assemble() -> None:
    sections = []
    for name in ORDER:
        path = HERE / "results" / f"{name}.md"
        if path.is_file():
            sections.append(path.read_text().strip() + "\n")
    extra = sorted(p for p in (HERE / "results").glob("*.md") if p.stem not in ORDER)
    sections += [p.read_text().strip() + "\n" for p in extra]
    (ROOT / "BENCHMARKS.md").write_text(INTRO + "\n" + "\n".join(sections))
    print(f"wrote {ROOT / 'BENCHMARKS.md'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--assemble-only", action="store_true")
    args = parser.parse_args()
    skipped, failed = [], []
    if not args.assemble_only:
        for script in sorted(HERE.glob("bench_*.py")):
            print(f"== {script.name}", flush=True)
            status = subprocess.run([sys.executable, str(script)], check=False).returncode
            if status == SKIPPED:
                skipped.append(script.name)
            elif status != 0:
                failed.append(f"{script.name} (exit {status})")
    assemble()
    if skipped:
        print(f"skipped for missing material, their results left as they were: {', '.join(skipped)}")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
