"""The benchmarks' rule for missing real material: skip with a message naming what is missing and how
to get it, and leave the committed results as they are (they are only ever rewritten from real
measurements: a row of `n/a` for a model that was not there would overwrite a real figure)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

# Exit status of a benchmark skipped for missing material; run_all.py lists those apart from failures.
SKIPPED = 4
ROOT = Path(__file__).resolve().parent.parent


def skip(script: str, results: Path, missing: dict[str, str]) -> NoReturn:
    """Print why ``script`` is skipped and exit with SKIPPED; ``results`` stays as it is."""
    try:
        shown = results.resolve().relative_to(ROOT)
    except ValueError:
        shown = results
    print(f"{script}: skipped, {shown} left as it is: real material missing", file=sys.stderr)
    for key, why in missing.items():
        print(f"  {key}: {why}", file=sys.stderr)
    raise SystemExit(SKIPPED)


def require(script: str, results: Path, keys: list[str] | None) -> None:
    """Skip ``script`` unless every benchmark case in ``keys`` (default: all) has its material installed."""
    from sealtrace import zoo

    try:
        missing = zoo.missing_material(keys)
    except KeyError as exc:
        raise SystemExit(f"{script}: {exc.args[0]}") from None
    if missing:
        skip(script, results, missing)
