"""Ledger appends per second: SQLite and PostgreSQL, 1 and 32 concurrent appenders, every append durable.

Each append returns only once its record is committed (SQLite: WAL, ``synchronous=FULL``; PostgreSQL:
a throwaway server with fsync on, the default ``synchronous_commit``). Concurrent appends are group-committed:
one transaction and one fsync per batch. Records are built before the clock starts (what
``new_record`` costs is measured apart); each carries a unique 4 KiB input stored by digest, and tree heads
are signed every 1000 records, as a server would.

    python benchmarks/bench_ledger.py [--seconds 5] [--repeats 3] [--dsn postgresql://...] [--store sqlite,postgres]

Without ``--dsn`` a PostgreSQL server is started for the run (Debian's ``postgresql`` binaries).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from sealtrace.ledger import Ledger, new_record  # noqa: E402


def records(count: int, seed: int) -> list[tuple[dict[str, Any], dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    made = []
    for i in range(count):
        feeds = {"x": rng.standard_normal(1024).astype(np.float32)}
        record = new_record(model_name="bench", plan_digest="ab" * 32, container_digest="cd" * 32,
                            backend="onnxruntime", backend_version="1.23", inputs=feeds,
                            outputs={"y": np.float32([i])}, principal="bench", audit="io")
        made.append((record, feeds))
    return made


def measure(location: str, threads: int, seconds: float, prepared: list[Any]) -> dict[str, float]:
    """Appends per second over ``seconds`` with ``threads`` appenders, and per-append latency."""
    key = Ed25519PrivateKey.generate()
    latencies: list[float] = []
    lock = threading.Lock()
    cursor = iter(range(len(prepared)))
    with Ledger.open(location, signer=key, head_every=1000, head_interval=10.0) as ledger:
        ledger.append(*prepared[next(cursor)])  # connections and tables ready before the clock starts
        deadline = time.perf_counter() + seconds

        def appender() -> int:
            done = 0
            while time.perf_counter() < deadline:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    break
                record, feeds = prepared[i]
                start = time.perf_counter()
                ledger.append(record, inputs=feeds)
                latencies.append(time.perf_counter() - start)
                done += 1
            return done

        start = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            total = sum(pool.map(lambda _: appender(), range(threads)))
        elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "rate": total / elapsed,
        "count": total,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


def record_cost(prepared_count: int = 2000) -> float:
    """Microseconds to build one record (digests of a 4 KiB input and a small output, format check)."""
    start = time.perf_counter()
    records(prepared_count, 1)
    return 1e6 * (time.perf_counter() - start) / prepared_count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--dsn", help="PostgreSQL to use (a schema of its own is created); default: start one")
    parser.add_argument("--store", default="sqlite,postgres")
    parser.add_argument("--threads", default="1,32")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over every configuration; medians are reported")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "ledger.md")
    args = parser.parse_args()
    stores = args.store.split(",")
    counts = [int(t) for t in args.threads.split(",")]
    prepared = records(60_000, 0)
    rows = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=ROOT) as scratch:
        server = None
        dsn = args.dsn
        if "postgres" in stores and dsn is None:
            from tests.ledger.postgres import temporary_postgres

            server = temporary_postgres(fsync=True)
            dsn = server.__enter__()
        try:
            # Rounds over all configurations, so that a burst of load on this shared machine hits them alike.
            runs: dict[tuple[str, int], list[dict[str, float]]] = {}
            for round_ in range(args.repeats):
                for store in stores:
                    for threads in counts:
                        if store == "sqlite":
                            location = str(Path(scratch) / f"ledger-{threads}-{round_}.db")
                        else:
                            location = _fresh_schema(str(dsn))
                        result = measure(location, threads, args.seconds, prepared)
                        runs.setdefault((store, threads), []).append(result)
                        print(f"{store:9} {threads:3} appenders: {result['rate']:8.0f} appends/s "
                              f"(p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms)", flush=True)
            for (store, threads), results in runs.items():
                median = {key: statistics.median(r[key] for r in results) for key in results[0]}
                median["low"], median["high"] = min(r["rate"] for r in results), max(r["rate"] for r in results)
                rows.append((store, threads, median))
        finally:
            if server is not None:
                server.__exit__(None, None, None)
    cost = record_cost()
    print(f"new_record: {cost:.0f} us per record")
    write_results(args.out, rows, cost, args.seconds, args.repeats, (load_before, os.getloadavg()[0]))


def _fresh_schema(dsn: str) -> str:
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in dsn else "?"
    return f"{dsn}{separator}options=-csearch_path%3D{schema}"


def write_results(path: Path, rows: list[tuple[str, int, dict[str, float]]], cost: float, seconds: float,
                  repeats: int, load: tuple[float, float]) -> None:
    sys.path.insert(0, str(HERE))
    from machine import machine_facts

    facts = machine_facts()
    lines = [
        "## Ledger appends",
        "",
        f"`python benchmarks/bench_ledger.py --seconds {seconds:g} --repeats {repeats}` on {facts['cpu']} ({facts['cores']} cores, "
        "shared). Every append returns once its record is durable (SQLite WAL with synchronous=FULL; PostgreSQL "
        "with fsync on); concurrent appends are group-committed. Each record carries a unique 4 KiB input stored "
        f"by digest; tree heads are signed every 1000 records. Load average {load[0]:.1f} before the run, "
        f"{load[1]:.1f} after (the figures move with it).",
        "",
        "Medians of the rounds (the range of appends/s in brackets).",
        "",
        "| store | appenders | appends/s | p50 latency | p99 latency |",
        "|---|---|---|---|---|",
    ]
    for store, threads, result in rows:
        lines.append(f"| {store} | {threads} | {result['rate']:.0f} ({result['low']:.0f}-{result['high']:.0f}) | "
                     f"{result['p50_ms']:.2f} ms | {result['p99_ms']:.2f} ms |")
    lines += ["", f"Building a record (`new_record`: digests of its values, format check) costs {cost:.0f} us, "
              "outside the figures above.", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
