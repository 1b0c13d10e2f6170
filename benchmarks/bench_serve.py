"""Serving throughput and latency: `sealtrace serve` against the baseline a user would write.

Configurations, each a separate server process on loopback, one real model:

- (a) ``baseline``: benchmarks/serve_baseline.py, minimal FastAPI + ONNX Runtime, same protocol, no ledger;
- (b) ``io``: ``sealtrace serve --audit io`` (ONNX Runtime; input/output digests, group-committed);
- (c) ``deferred``: ``sealtrace serve --audit deferred`` (ONNX Runtime answers; a niced replay process
  re-runs each request on the reference backend with the full per-op audit);
- (d) ``full``: ``sealtrace serve --audit full`` (the reference backend with the per-op audit on the
  critical path);
- ``baseline-json`` and ``io-json``: (a) and (b) with the input as a JSON array instead of binary, to
  show what JSON (de)serialization of the tensor costs.

Every answer of (b)-(d) is durable in a SQLite ledger (WAL, synchronous=FULL, on disk) before its 200.
The load generator is an asyncio httpx client with a fixed number of requests in flight (the
concurrency), running for a fixed time after a warm-up; it is bounded and stops by itself. With two or
more CPUs, the server (and its replay workers) is pinned to CPU 0 with ``taskset`` and the load
generator to CPU 1, so they do not fight over one core; ONNX Runtime gets one intra-op thread everywhere.
Rounds go over every configuration in turn, and the medians of the rounds are reported.

    python benchmarks/bench_serve.py [--model mobilenetv3-orientation] [--seconds 3] [--rounds 3]
                                     [--concurrency 1,8,32] [--configs baseline,io,deferred,full,...]
                                     [--out benchmarks/results/serve.md]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks.machine import machine_facts  # noqa: E402
from benchmarks.material import require  # noqa: E402

CONFIGS = ("baseline", "io", "deferred", "full", "baseline-json", "io-json")
MAX_REQUESTS = 200_000  # per measurement: the load generator is bounded whatever the duration


def _bodies(feeds: dict[str, np.ndarray]) -> dict[str, tuple[bytes, dict[str, str]]]:
    names = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32"}
    binary_inputs, blobs, json_inputs = [], [], []
    for name, value in feeds.items():
        blob = np.ascontiguousarray(value).tobytes()
        binary_inputs.append({"name": name, "shape": list(value.shape), "datatype": names[value.dtype],
                              "parameters": {"binary_data_size": len(blob)}})
        blobs.append(blob)
        json_inputs.append({"name": name, "shape": list(value.shape), "datatype": names[value.dtype],
                            "data": value.reshape(-1).tolist()})
    header = json.dumps({"inputs": binary_inputs}).encode()
    return {
        "binary": (header + b"".join(blobs), {"Inference-Header-Content-Length": str(len(header)),
                                              "Content-Type": "application/octet-stream"}),
        "json": (json.dumps({"inputs": json_inputs}).encode(), {"Content-Type": "application/json"}),
    }


def _pinned(command: list[str], cpu: int | None) -> list[str]:
    return (["taskset", "-c", str(cpu)] if cpu is not None else []) + command


def _start(config: str, model: Path, container: Path, keys: tuple[Path, Path], folder: Path, cpu: int | None) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
    if config.startswith("baseline"):
        command = [sys.executable, str(HERE / "serve_baseline.py"), str(model), "--port", "0", "--threads", "1"]
    else:
        audit = config.split("-")[0]
        ledger = folder / f"{config}-{time.monotonic_ns()}.db"
        command = [sys.executable, "-m", "sealtrace", "serve", str(container), "--name", "model", "--audit", audit,
                   "--backend", "reference" if audit == "full" else "onnxruntime", "--threads", "1",
                   "--ledger", str(ledger), "--sign", str(keys[0]), "--trust", str(keys[1]), "--port", "0",
                   "--log-level", "warning", "--replay-drain", "0"]
    child = subprocess.Popen(_pinned(command, cpu), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert child.stdout is not None
    deadline = time.monotonic() + 120
    lines = []
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        lines.append(line)
        found = re.search(r"serving on (http://\S+)", line)
        if found:
            threading.Thread(target=child.stdout.read, daemon=True).start()
            _wait_ready(found.group(1), deadline)
            return child, found.group(1)
    child.kill()
    raise SystemExit(f"bench_serve: the {config} server did not start: {''.join(lines)[-2000:]}")


def _wait_ready(url: str, deadline: float) -> None:
    import httpx

    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v2/health/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"bench_serve: {url} never became ready")


async def _load(url: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float,
                warmup: float) -> dict[str, float]:
    import httpx

    latencies: list[float] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120.0) as client:
        start = time.perf_counter()
        measure_from = start + warmup
        end = measure_from + seconds
        counted = 0

        async def worker() -> None:
            nonlocal counted
            while counted < MAX_REQUESTS:
                began = time.perf_counter()
                if began >= end:
                    return
                response = await client.post("/v2/models/model/infer", content=body, headers=headers)
                if response.status_code != 200:
                    raise SystemExit(f"bench_serve: {response.status_code} {response.text[:300]}")
                done = time.perf_counter()
                # Completions inside the window count (whenever they started): at high concurrency a
                # request of a slow configuration can take longer than the warm-up.
                if measure_from <= done <= end:
                    latencies.append(done - began)
                    counted += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    latencies.sort()
    return {
        "throughput": len(latencies) / seconds,
        "p50": latencies[len(latencies) // 2] * 1000 if latencies else float("nan"),
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000 if latencies else float("nan"),
        "count": len(latencies),
    }


def _metric(url: str, name: str) -> float:
    import httpx

    text = httpx.get(f"{url}/metrics", timeout=30).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _replay_figures(url: str, load_seconds: float) -> dict[str, float]:
    """Replays done during the load, the backlog when it stopped, and how fast it drains after."""
    during = _metric(url, "sealtrace_replays_total")
    backlog = _metric(url, "sealtrace_replay_backlog")
    started = time.monotonic()
    while _metric(url, "sealtrace_replay_backlog") > 0:
        if time.monotonic() - started > 600:
            raise SystemExit("bench_serve: the replay backlog did not drain in 600 s")
        time.sleep(0.25)
    drained = time.monotonic() - started
    after = _metric(url, "sealtrace_replays_total")
    diverged = _metric(url, "sealtrace_divergences_total")
    return {"during": during / load_seconds, "backlog": backlog, "drain_s": drained,
            "drain_rate": (after - during) / drained if drained > 0 else float("nan"), "total": after,
            "diverged": diverged}


def _stop(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGTERM)
    try:
        child.wait(timeout=120)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _fmt(values: list[float], digits: int = 1) -> str:
    return f"{statistics.median(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mobilenetv3-orientation")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--out", type=Path, default=HERE / "results" / "serve.md")
    args = parser.parse_args()
    require("bench_serve", args.out, [args.model])
    from sealtrace import zoo
    from sealtrace.container import seal_model
    from sealtrace.signing import generate_keypair

    configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"bench_serve: unknown configuration(s) {unknown}; known: {', '.join(CONFIGS)}")
    levels = [int(c) for c in args.concurrency.split(",")]
    real = zoo.model(args.model)
    bodies = _bodies(real.inputs())
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = client_cpu = None
    if len(cpus) >= 2 and shutil.which("taskset"):
        server_cpu, client_cpu = cpus[0], cpus[1]
        os.sched_setaffinity(0, {client_cpu})
    load_before = os.getloadavg()[0]
    results: dict[tuple[str, int], list[dict[str, float]]] = {}
    replays: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-serve-", dir=str(ROOT)) as tmp:
        folder = Path(tmp)  # on the project's disk (not a tmpfs): fsyncs are real
        keys = generate_keypair(folder / "key.pem")
        container = folder / "model.seal"
        seal_model(real.path, container, sign_with=keys[0])
        for round_ in range(args.rounds):
            for config in configs:
                child, url = _start(config, real.path, container, keys, folder, server_cpu)
                try:
                    body, headers = bodies["json" if config.endswith("-json") else "binary"]
                    load_seconds = 0.0
                    for level in levels:
                        figures = asyncio.run(_load(url, body, headers, level, args.seconds, args.warmup))
                        load_seconds += args.seconds + args.warmup
                        results.setdefault((config, level), []).append(figures)
                        print(f"round {round_ + 1} {config:14s} c={level:<3d} {figures['throughput']:8.1f} req/s "
                              f"p50 {figures['p50']:7.2f} ms  p99 {figures['p99']:7.2f} ms", file=sys.stderr, flush=True)
                    if config == "deferred":
                        replay = _replay_figures(url, load_seconds)
                        replays.append(replay)
                        print(f"round {round_ + 1} replays: {replay}", file=sys.stderr, flush=True)
                finally:
                    _stop(child)
    load_after = os.getloadavg()[0]
    _write(args, configs, levels, results, replays, real.key, server_cpu, client_cpu, load_before, load_after)


def _write(args: Any, configs: list[str], levels: list[int], results: dict[tuple[str, int], list[dict[str, float]]],
           replays: list[dict[str, float]], model: str, server_cpu: int | None, client_cpu: int | None,
           load_before: float, load_after: float) -> None:
    facts = machine_facts()
    pinning = (f"server (and its replay workers) pinned to CPU {server_cpu}, load generator to CPU {client_cpu} "
               "(`taskset`, `sched_setaffinity`)" if server_cpu is not None else "not pinned (one CPU)")
    lines = [
        "## Serving",
        "",
        f"`python benchmarks/bench_serve.py --model {model} --seconds {args.seconds:g} --rounds {args.rounds}` on "
        f"{facts['cpu']} ({facts['cores']} cores, shared), onnxruntime {facts['onnxruntime']}. Loopback HTTP, "
        f"{pinning}; ONNX Runtime with one intra-op thread; a SQLite ledger on disk (every answer durable before "
        f"its 200). Input sent as binary tensor data unless the configuration says json. Load average "
        f"{load_before:.1f} before the run, {load_after:.1f} after.",
        "",
        "Medians of the rounds (throughput range in brackets); ratios against the baseline at the same concurrency.",
        "",
        "| configuration | concurrency | requests/s | p50 ms | p99 ms | throughput vs (a) | p99 vs (a) |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = {"baseline": "(a) baseline FastAPI + ORT", "io": "(b) serve --audit io", "deferred": "(c) serve --audit deferred",
              "full": "(d) serve --audit full", "baseline-json": "(a) baseline, JSON input", "io-json": "(b) --audit io, JSON input"}
    for config in configs:
        for level in levels:
            runs = results.get((config, level), [])
            if not runs:
                continue
            throughput = [r["throughput"] for r in runs]
            p50 = [r["p50"] for r in runs]
            p99 = [r["p99"] for r in runs]
            base_name = "baseline-json" if config.endswith("-json") else "baseline"
            base = results.get((base_name, level))
            ratio_t = ratio_p = "-"
            if base and config != base_name:
                ratio_t = f"{statistics.median(throughput) / statistics.median(r['throughput'] for r in base):.2f}x"
                ratio_p = f"{statistics.median(p99) / statistics.median(r['p99'] for r in base):.2f}x"
            lines.append(f"| {labels[config]} | {level} | {_fmt(throughput)} ({min(throughput):.0f}-{max(throughput):.0f}) | "
                         f"{_fmt(p50, 2)} | {_fmt(p99, 2)} | {ratio_t} | {ratio_p} |")
    if replays:
        lines += [
            "",
            "Deferred audit (c): replays on the reference backend with the full per-op audit, in one replay process at "
            "nice 19 on the server's CPU. Medians of the rounds:",
            "",
            "| replays/s during the load | backlog when the load stopped | drain time | replays/s once idle | replays | divergences |",
            "|---|---|---|---|---|---|",
            f"| {_fmt([r['during'] for r in replays])} | {_fmt([r['backlog'] for r in replays], 0)} | "
            f"{_fmt([r['drain_s'] for r in replays])} s | {_fmt([r['drain_rate'] for r in replays])} | "
            f"{_fmt([r['total'] for r in replays], 0)} | {_fmt([r['diverged'] for r in replays], 0)} |",
        ]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
