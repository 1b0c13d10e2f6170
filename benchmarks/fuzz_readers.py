"""`make fuzz`: the fuzz suite's long run, 100,000 generated inputs per reader of outside bytes.

    python benchmarks/fuzz_readers.py --record               # every reader, 100,000 inputs each (make fuzz)
    python benchmarks/fuzz_readers.py --examples 2000 --readers vnnlib,npy-input   # a quick look

Each reader runs in its own process (its own copy of the seed material, since inputs are written
over the seed files), two at a time on a two-core machine, under an address-space limit as a guard.
The invariant is the default test run's (tests/fuzz/driver.py): exit 0, 1 or 2, never 3; an answer
within the time limit; peak memory within the budget plus sealtrace's working set; no mutation of
signed data accepted. Inputs that break it are kept in tests/fuzz/corpus/ (replayed by `make test`).
With --record, each reader's outcome is kept in benchmarks/results/fuzz/READER.json as soon as it is
measured, and benchmarks/results/fuzz.md is made from all of them: a run of some readers updates their
rows and keeps the others'. Without it, the table is printed and nothing is written.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

# A guard against a runaway allocation taking the machine down; the invariant itself is measured on
# the peak resident size (VmHWM) of each call.
ADDRESS_SPACE_LIMIT = 8 << 30
# Inputs per hypothesis run: long runs are split so each run starts from its own seed.
CHUNK = 10_000
KEPT = HERE / "results" / "fuzz"


def child(reader_name: str, examples: int, seed: int, out: Path) -> None:
    from tests.fuzz.driver import fuzz, prepare
    from tests.fuzz.material import build_material
    from tests.fuzz.readers import BY_NAME

    reader = BY_NAME[reader_name]
    started = time.perf_counter()
    outcomes: dict[str, int] = {}
    violations: list[dict[str, str]] = []
    generator_errors: list[str] = []
    peak = 0
    with tempfile.TemporaryDirectory(prefix=f"sealtrace-fuzz-{reader_name}-") as tmp:
        material = build_material(Path(tmp))
        prepare(material)
        done = 0
        while done < examples:
            n = min(CHUNK, examples - done)
            try:
                tally = fuzz(reader, material, n, random_seed=seed * 1_000_003 + done)
            except Exception as exc:  # the generator's own failure (hypothesis), not the reader's
                generator_errors.append(f"inputs {done}-{done + n}: {type(exc).__name__}: {str(exc)[:300]}")
                done += n
                continue
            for outcome, count in tally.outcomes.items():
                outcomes[outcome] = outcomes.get(outcome, 0) + count
            peak = max(peak, tally.peak_growth)
            for v in tally.violations:
                violations.append({"problem": v.problem, "kept": str(v.save().relative_to(ROOT))})
            done += n
    out.write_text(json.dumps({"reader": reader_name, "outcomes": outcomes, "violations": violations,
                               "generator_errors": generator_errors, "peak_growth": peak,
                               "seconds": time.perf_counter() - started}))


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


def run_child(reader: str, examples: int, seed: int, tmp: Path, record: bool) -> dict[str, object]:
    out = tmp / f"{reader}.json"
    proc = subprocess.run(
        [sys.executable, __file__, "--child", reader, "--examples", str(examples), "--seed", str(seed),
         "--out", str(out)],
        preexec_fn=_limit, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0 or not out.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        print(f"{reader}: the fuzz process failed (exit {proc.returncode}): {tail}", flush=True)
        return {"reader": reader, "outcomes": {}, "violations": [{"problem": f"fuzz process failed: {tail}"}],
                "peak_growth": 0, "seconds": 0.0}
    result: dict[str, object] = json.loads(out.read_text())
    result["examples"] = examples
    result["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                      text=True, check=False).stdout.strip()
    if record:
        KEPT.mkdir(parents=True, exist_ok=True)
        (KEPT / f"{reader}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"{reader}: {sum(result['outcomes'].values())} inputs, {len(result['violations'])} violation(s), "  # type: ignore[union-attr]
          f"{result['seconds']:.0f} s", flush=True)
    return result


def report(results: list[dict[str, object]], not_run: list[str] | None = None) -> str:
    from tests.fuzz.driver import FUZZ_BUDGET, MEMORY_ALLOWANCE, TIME_LIMIT_S

    from machine import machine_facts

    facts = machine_facts()
    hours = sum(float(r["seconds"]) for r in results) / 3600  # type: ignore[arg-type]
    lines = [
        "## Fuzz suite: every reader of outside bytes (issue 14)",
        "",
        "Command: `make fuzz` (`python benchmarks/fuzz_readers.py`: 100,000 inputs per reader, two readers at a "
        f"time, at nice 19 beside other work); {hours:.1f} CPU-hours in all on {facts['cpu']}, {facts['cores']} "
        f"cores, Python {facts['python']}, numpy {facts['numpy']}, onnx {facts['onnx']}, onnxruntime "
        f"{facts['onnxruntime']}.",
        "",
        "Each input is a hypothesis-generated mutation of a valid seed (tests/fuzz/mutations.py: byte edits, "
        "hostile JSON values, line edits, forged .npy headers, VNNLIB tokens), given to the reader through the CLI "
        "in-process, or through the parsing API where no verb reads the format alone (tests/fuzz/readers.py). "
        f"Invariant (target: zero violations): exit 0, 1 or 2, never 3; an answer within {TIME_LIMIT_S} s; peak "
        f"resident memory within the {FUZZ_BUDGET >> 20} MiB budget plus {MEMORY_ALLOWANCE >> 20} MiB for "
        "sealtrace's own working set; no mutation of signed data accepted (unless it means the same: the same "
        "JSON, model or table rows).",
        "",
        "| reader | inputs | exit 0 | exit 1 | exit 2 | exit 3 | timeouts | violations | largest peak growth | inputs/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    total = violations = 0
    for r in results:
        outcomes: dict[str, int] = r["outcomes"]  # type: ignore[assignment]
        n = sum(outcomes.values())
        total += n
        violations += len(r["violations"])  # type: ignore[arg-type]
        rate = n / r["seconds"] if r["seconds"] else 0.0  # type: ignore[operator]
        lines.append(
            f"| {r['reader']} | {n:,} | {outcomes.get('exit 0', 0):,} | {outcomes.get('exit 1', 0):,} | "
            f"{outcomes.get('exit 2', 0):,} | {outcomes.get('exit 3', 0):,} | {outcomes.get('timeout', 0):,} | "
            f"{len(r['violations'])} | {int(r['peak_growth']) >> 20} MiB | {rate:.0f} |"  # type: ignore[call-overload]
        )
    lines += ["", f"Total: {total:,} inputs over {len(results)} readers, {violations} violation(s)."]
    if not_run:
        lines.append(f"Not yet run at this length: {', '.join(not_run)} (`make fuzz` runs every reader; "
                     "`--readers` picks some).")
    commits = sorted({str(r["commit"]) for r in results if r.get("commit")})
    if commits:
        lines.append(f"Measured at commit(s) {', '.join(commits)}.")
    for r in results:
        for v in r["violations"][:5]:  # type: ignore[index]
            fixed = f"; fixed since: {v['fixed']}" if v.get("fixed") else ""
            lines.append(f"- {r['reader']}: {v['problem'][:200]} ({v.get('kept', '')}){fixed}")
    for r in results:
        for error in r.get("generator_errors", []):  # type: ignore[attr-defined]
            lines.append(f"- {r['reader']}: the input generator failed, those inputs were not run: {error[:200]}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=100_000)
    parser.add_argument("--readers", default=None, help="comma-separated reader names (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--record", action="store_true", help="keep the outcomes and rewrite results/fuzz.md")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.examples, args.seed, args.out)
        return
    from tests.fuzz.readers import READERS

    names = args.readers.split(",") if args.readers else [r.name for r in READERS]
    unknown = sorted(set(names) - {r.name for r in READERS})
    if unknown:
        parser.error(f"unknown reader(s) {', '.join(unknown)}; readers: {', '.join(r.name for r in READERS)}")
    with tempfile.TemporaryDirectory(prefix="sealtrace-fuzz-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda name: run_child(name, args.examples, args.seed, Path(tmp), args.record), names))
    if args.record:
        kept = {p.stem: json.loads(p.read_text()) for p in sorted(KEPT.glob("*.json"))}
        ordered = [kept[r.name] for r in READERS if r.name in kept]
        (HERE / "results" / "fuzz.md").write_text(report(ordered, [r.name for r in READERS if r.name not in kept]))
        print(f"wrote {HERE / 'results' / 'fuzz.md'} ({len(ordered)} of {len(READERS)} readers measured)")
    else:
        print(report(results))
    if any(r["violations"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
