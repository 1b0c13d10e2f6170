"""`sealtrace batch` throughput: in this process and on Ray with 1 and 2 workers, against a plain loop over
`Session.run` on the same data; and the ledger's append rate, which bounds a cluster's throughput.

The model is an MLP of 8 MatMul+Tanh layers, 256 wide (a small model: per-request overheads show, as
they do for the many small models audited in bulk). The data is a directory of .npz requests. Each
configuration runs the same job into a fresh SQLite ledger (WAL, synchronous=FULL); `--audit io` on
ONNX Runtime and `--audit full` (per-op trail) on the reference backend, one thread per worker.
Requests per second are over the whole job, container verification included; Ray's start-up is not
(it is reported apart). The append rate is one driver submitting records without waiting (what
`batch` does), group-committed, for SQLite and a PostgreSQL server started for the run (fsync on).

    python benchmarks/bench_scale.py [--requests 400] [--full-requests 120] [--out benchmarks/results/scale.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from sealtrace.cli import main as cli  # noqa: E402


def mlp(layers: int = 8, width: int = 256) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes, inits, current = [], [], "x"
    for i in range(layers):
        inits.append(numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [current, f"w{i}"], [f"m{i}"]), helper.make_node("Tanh", [f"m{i}"], [f"t{i}"])]
        current = f"t{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info(current, TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def dataset(folder: Path, count: int, width: int = 256) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(count):
        np.savez(folder / f"r{i:06d}.npz", x=rng.standard_normal((1, width)).astype(np.float32))
    return folder


def plain_loop(model: Path, data: Path, backend: str, count: int) -> float:
    """Requests/s of the loop a user would write: read each file, Session.run, nothing recorded (the
    reference backend without its audit: what the full-audit batch adds is the trail)."""
    from sealtrace import Session
    from sealtrace.arrayfiles import load_npz
    from sealtrace.backends import make_backend

    session = Session(str(model), backend=make_backend(backend, 1))
    files = sorted(data.iterdir())[:count]
    session.run(None, load_npz(files[0]))
    started = time.perf_counter()
    for path in files:
        session.run(None, load_npz(path))
    return len(files) / (time.perf_counter() - started)


def batch(model: Path, data: Path, ledger: Path, audit: str, key: Path, executor: Any) -> float:
    from sealtrace.scale import BatchJob, run_batch

    summary = run_batch(BatchJob(str(model), str(data), str(ledger), audit=audit, sign_key=str(key), task_size=16),
                        executor)
    assert summary.recorded == summary.requests and not summary.failures
    return summary.requests / summary.seconds


def append_rate(location: str, count: int) -> float:
    """Records/s one thread appends by submitting without waiting (group-committed), durable at the end."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from sealtrace.ledger import Ledger, new_record

    rng = np.random.default_rng(2)
    made = []
    for i in range(count + 1):
        feeds = {"x": rng.standard_normal(256).astype(np.float32)}
        made.append((new_record(model_name="bench", plan_digest="ab" * 32, container_digest="cd" * 32,
                                backend="onnxruntime", backend_version="1", inputs=feeds,
                                outputs={"y": np.float32([i])}, audit="io"), feeds))
    with Ledger.open(location, signer=Ed25519PrivateKey.generate()) as ledger:
        ledger.append(*made[0])
        started = time.perf_counter()
        futures = [ledger.submit(record, inputs=feeds) for record, feeds in made[1:]]
        for future in futures:
            future.result()
        return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="requests of the --audit io runs")
    parser.add_argument("--full-requests", type=int, default=120, help="requests of the --audit full runs")
    parser.add_argument("--appends", type=int, default=20000, help="records of the append-rate runs")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scale.md")
    args = parser.parse_args()
    from sealtrace.scale import InProcess, RayExecutor

    load_before = os.getloadavg()[0]
    rows: dict[tuple[str, str], list[float]] = {}
    ray_start: list[float] = []
    warm: dict[tuple[str, int], float] = {}
    driver: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(dir=ROOT) as scratch:
        w = Path(scratch)
        onnx.save(mlp(), w / "mlp.onnx")
        assert cli(["keygen", "-o", str(w / "k.pem")]) == 0
        assert cli(["seal", str(w / "mlp.onnx"), "-o", str(w / "mlp.seal")]) == 0
        data = {"io": dataset(w / "io", args.requests), "full": dataset(w / "full", args.full_requests)}
        model = w / "mlp.seal"
        backends = {"io": "onnxruntime", "full": "reference"}
        for round_ in range(args.repeats):
            for audit in ("io", "full"):
                count = args.requests if audit == "io" else args.full_requests
                rows.setdefault((audit, "plain loop over Session.run"), []).append(
                    plain_loop(model, data[audit], backends[audit], count))
                rows.setdefault((audit, "batch, in this process"), []).append(
                    batch(model, data[audit], w / f"{audit}-{round_}-local.db", audit, w / "k.pem", InProcess()))
            for workers in (1, 2):
                started = time.perf_counter()
                executor = RayExecutor("local", workers)
                ray_start.append(time.perf_counter() - started)
                try:
                    for audit in ("io", "full"):
                        # Workers start on their first task (a process, imports, the container verified, a
                        # backend session): minutes' jobs amortize that, this short one would not.
                        warm_up = time.perf_counter()
                        batch(model, data[audit], w / f"{audit}-{round_}-warm{workers}.db", audit, w / "k.pem", executor)
                        warm[(audit, workers)] = time.perf_counter() - warm_up
                        cpu = time.process_time()
                        rows.setdefault((audit, f"batch --ray, {workers} worker(s)"), []).append(
                            batch(model, data[audit], w / f"{audit}-{round_}-ray{workers}.db", audit, w / "k.pem", executor))
                        # The driver's own CPU per request (reading, shipping, appending; its ledger writer
                        # thread included): what bounds one driver whatever the cluster.
                        count = args.requests if audit == "io" else args.full_requests
                        driver.setdefault(audit, []).append((time.process_time() - cpu) / count)
                finally:
                    executor.close()
            for key, values in rows.items():
                print(f"{key[0]:4} {key[1]:32} {values[-1]:8.1f} requests/s", flush=True)
        appends: dict[str, float] = {"sqlite": append_rate(str(w / "appends.db"), args.appends)}
        print(f"sqlite appends {appends['sqlite']:.0f}/s", flush=True)
        try:
            from tests.ledger.postgres import temporary_postgres

            with temporary_postgres(fsync=True) as dsn:
                import psycopg

                schema = f"bench_{uuid.uuid4().hex[:12]}"
                with psycopg.connect(dsn, autocommit=True) as connection:
                    connection.execute(f"CREATE SCHEMA {schema}")
                appends["postgres"] = append_rate(f"{dsn}?options=-csearch_path%3D{schema}", args.appends)
                print(f"postgres appends {appends['postgres']:.0f}/s", flush=True)
        except Exception as exc:  # no PostgreSQL binaries here: the SQLite figure stands alone
            print(f"postgres: not measured ({exc})", flush=True)
    write(args, rows, ray_start, warm, driver, appends, (load_before, os.getloadavg()[0]))


def write(args: argparse.Namespace, rows: dict[tuple[str, str], list[float]], ray_start: list[float],
          warm: dict[tuple[str, int], float], driver: dict[str, list[float]], appends: dict[str, float],
          load: tuple[float, float]) -> None:
    from machine import machine_facts

    facts = machine_facts()
    import ray

    lines = [
        "## Batch runs (`sealtrace batch`) and the cluster's bound",
        "",
        f"`python benchmarks/bench_scale.py --requests {args.requests} --full-requests {args.full_requests} "
        f"--repeats {args.repeats}` on {facts['cpu']} ({facts['cores']} cores, shared with other jobs: load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after), Ray {ray.__version__}, ONNX Runtime {facts['onnxruntime']}. "
        "An MLP of 8 MatMul+Tanh layers 256 wide, one request of [1, 256] float32 per .npz file; every record "
        "durable in a SQLite ledger (WAL, synchronous=FULL) with its input stored. One thread per worker. "
        "Medians of the rounds (range in brackets).",
        "",
        "The plain loop reads each file and calls `Session.run` on the same backend, recording nothing (no "
        "audit, no ledger); `batch` makes each record (digests; with full audit the per-op trail, compressed), "
        "appends it durably in position order and stores the input. On Ray, each configuration's workers first "
        "ran the same job once (a worker's first task starts its process, imports sealtrace, verifies the "
        "container and opens the backend: "
        + ", ".join(f"{a} with {n} worker(s) {t:.1f} s" for (a, n), t in warm.items())
        + " for that first job), so the figures are a warm cluster's, as in a long job.",
        "",
        "| audit | how | requests/s |",
        "|---|---|---|",
    ]
    for (audit, how), values in rows.items():
        backend = "onnxruntime" if audit == "io" else "reference, per-op trail"
        lines.append(f"| {audit} ({backend}) | {how} | {statistics.median(values):.0f} "
                     f"({min(values):.0f}-{max(values):.0f}) |")
    lines += [
        "",
        f"Starting a local Ray takes {statistics.median(ray_start):.1f} s (not in the figures). Ledger appends "
        "one driver sustains, submitting without waiting (group commits, each durable): "
        + ", ".join(f"{store} {rate:.0f} records/s" for store, rate in appends.items()) + ". The driver's own CPU "
        "per request on Ray (reading the file, shipping the task, taking the result, appending; its ledger writer "
        "thread included): " + ", ".join(f"{audit} {1e6 * statistics.median(v):.0f} us (one driver: at most "
                                         f"{1 / statistics.median(v):.0f} requests/s)" for audit, v in driver.items()) + ".",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
