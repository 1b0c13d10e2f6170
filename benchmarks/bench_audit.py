"""Cost of a full audit: median run time with and without ``audit=`` on each real model.

Full audit means every output of every step hashed in full (no elision), sampled, summarized,
chained and written to a log file on disk. Runs with and without audit alternate in one process
(side by side: the machine's noise hits both alike); each model gets a warm-up of each first.
The ratio is the median of the per-pair ratios (audit run / the plain run beside it).

    python benchmarks/bench_audit.py [--repeats 11] [--models a,b] [--budget 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TARGET = 1.10  # the limit; the goal is 1.05
SHA256_BYTES_PER_S = 1.8e9  # one core with SHA-NI (hashlib/OpenSSL), measured on the benchmark host


def measure(path: str, feeds: dict[str, Any], repeats: int, budget_s: float, logs: Path) -> dict[str, Any]:
    """Alternate plain and audited runs; return medians, the ratio and what one log holds."""
    from sealtrace import Session
    from sealtrace.audit import AuditRecorder, verify_log

    session = Session(path)
    counter = iter(range(10**6))

    def audited() -> AuditRecorder:
        log = logs / f"run{next(counter)}.jsonl"
        recorder = AuditRecorder(log)
        session.run(None, feeds, audit=recorder)
        return recorder

    cpu: dict[str, list[float]] = {"plain": [], "audit": []}

    def timed(fn: Any) -> tuple[float, Any]:
        # Wall time is what the issue limits; process CPU time (all threads) shows what the audit
        # costs in total, which is what wall time approaches when no core is idle.
        start, start_cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall, used = time.perf_counter() - start, time.process_time() - start_cpu
        cpu["audit" if isinstance(result, AuditRecorder) else "plain"].append(used)
        return wall, result

    with np.errstate(all="ignore"):
        first, _ = timed(lambda: session.run(None, feeds))
        _, recorder = timed(audited)  # warm-up: per-Plan facts and weight digests are made once
        count = max(3, min(repeats, int(budget_s / max(2 * first, 1e-9))))
        plain, audit, ratios = [], [], []
        for i in range(count):
            # Alternate which goes first, so neither always runs on a cache the other warmed.
            if i % 2:
                p, _ = timed(lambda: session.run(None, feeds))
                a, recorder = timed(audited)
            else:
                a, recorder = timed(audited)
                p, _ = timed(lambda: session.run(None, feeds))
            plain.append(p)
            audit.append(a)
            ratios.append(a / p)
    assert recorder.path is not None
    verified = verify_log(recorder.path)
    hashed = sum(
        int(np.prod(o["shape"], dtype=np.int64)) * np.dtype(o["dtype"]).itemsize
        for r in verified.steps
        for o in r["outputs"]
        if o["kind"] == "tensor" and o["dtype"] != "str"
    )
    return {
        "plain_s": statistics.median(plain),
        "audit_s": statistics.median(audit),
        "ratio": statistics.median(ratios),
        # The fastest run of each kind: what a run costs when nothing else on the machine interferes.
        "best_ratio": min(audit) / min(plain),
        "cpu_ratio": statistics.median(cpu["audit"]) / max(statistics.median(cpu["plain"]), 1e-9),
        "runs": count,
        "steps": len(verified.steps),
        "hashed_mb": hashed / 2**20,
        "log_kb": recorder.path.stat().st_size / 1024,
        "verified": verified.ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11, help="pairs of runs per model at most")
    parser.add_argument("--budget", type=float, default=30.0, help="seconds of timed runs per model at most")
    parser.add_argument("--models", default=None, help="comma-separated keys (default: all real models)")
    parser.add_argument("--out", default=str(HERE / "results" / "audit.md"))
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    from machine import facts_markdown
    from sealtrace import zoo
    from sealtrace.audit.recorder import default_hash_threads

    wanted = args.models.split(",") if args.models else None
    rows = []
    ratios = []
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        for key, path, feeds in zoo.benchmark_cases(wanted):
            logs = Path(tmp) / key
            logs.mkdir()
            try:
                r = measure(path, feeds, args.repeats, args.budget, logs)
            except Exception as exc:  # a model whose kernels are missing is reported, not fatal
                print(f"{key}: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                rows.append(f"| {key} | n/a | n/a | n/a | | | | | | | failed: {type(exc).__name__} |")
                continue
            ratios.append(r["ratio"])
            verdict = "ok" if r["ratio"] <= TARGET else "over"
            rows.append(
                f"| {key} | {r['plain_s'] * 1e3:.1f} | {r['audit_s'] * 1e3:.1f} | {r['ratio']:.3f} | "
                f"{r['best_ratio']:.3f} | "
                f"{r['cpu_ratio']:.2f} | {r['steps']} | {r['hashed_mb']:.1f} | "
                f"{r['hashed_mb'] * 2**20 / SHA256_BYTES_PER_S * 1e3:.0f} | {r['log_kb']:.0f} | "
                f"{verdict}{'' if r['verified'] else ' (log failed verify)'} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    geomean = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
    text = "\n".join(
        [
            "## Audit overhead",
            "",
            "Command: `python benchmarks/bench_audit.py` (part of `make bench`). Full audit: every output "
            "of every step hashed in full (sha256, no elision), sampled, summarized, chained and written to "
            "a log on disk. Plain and audited runs alternate in one process; times are medians, the wall ratio "
            "is the median of per-pair ratios (audited / plain), the best-run ratio compares the fastest run "
            "of each kind, the CPU ratio compares process CPU time (all threads, BLAS threads' spinning "
            "included). Limit 1.10 (wall), goal 1.05.",
            "",
            facts_markdown(int(os.environ.get("OPENBLAS_NUM_THREADS", os.cpu_count() or 1))),
            "",
            f"Hash threads: {default_hash_threads()} (plus the log writer thread).",
            "",
            "| model | plain ms | audited ms | wall ratio | best-run ratio | CPU ratio | steps | MB hashed/run "
            "| sha256 ms on one core | log KB | <= 1.10 |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Geometric mean wall ratio: {geomean:.3f}. Load average when measured: "
            f"{', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs.",
            "",
            "What bounds the ratio: every output byte goes through sha256, about 1.8 GB/s per core; the "
            "'sha256 ms on one core' column is that work alone. Where it approaches or exceeds the plain run "
            "time, a ratio near 1 needs that many idle cores for the hashing pool (it scales to 8 threads), "
            "which a 2-CPU host shared with other jobs does not have. Models whose steps take a few "
            "microseconds (Silero VAD, ACAS Xu) are bound instead by the writer's 25-30 us of Python per step.",
            "",
        ]
    )
    Path(args.out).parent.mkdir(exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
