"""Seal and verify throughput on a >= 1 GB container, against single-thread sha256 and sha256sum.

    .venv/bin/python benchmarks/bench_container.py [--size-gb 1.0] [--tensor-mb 64] [--dir /tmp]

Verification reads from the page cache (the container was just written and is read once before
timing). Peak RSS is measured in a fresh process per container size, so it shows whether memory
grows with the model (the verifier reads 1 MiB blocks with pread, one buffer per thread: no memory map,
which a file truncated meanwhile would turn into SIGBUS). Prints a markdown
table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sealtrace.container import seal_model, verify_container
from sealtrace.container.chunks import default_workers
from sealtrace.plan import build_plan


def build_model(total_bytes: int, tensor_bytes: int) -> object:
    """x[1,n] -> MatMul chain over square float32 weights, ``total_bytes`` of them."""
    n = int((tensor_bytes // 4) ** 0.5)
    count = max(1, -(-total_bytes // (n * n * 4)))
    rng = np.random.default_rng(0)
    weights, nodes = [], []
    previous = "x"
    for i in range(count):
        w = rng.standard_normal((n, n), dtype=np.float32) * (1.0 / n) ** 0.5
        weights.append(numpy_helper.from_array(w, f"layer{i}.weight"))
        nodes.append(helper.make_node("MatMul", [previous, f"layer{i}.weight"], [f"h{i}"], name=f"matmul{i}"))
        previous = f"h{i}"
    graph = helper.make_graph(
        nodes, "bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, n])],
        weights,
    )  # fmt: skip
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)])


def sha256_single_thread(path: Path) -> float:
    """Seconds for one hashlib.sha256 over the whole mapped file, one thread."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        start = time.perf_counter()
        hashlib.sha256(m).hexdigest()
        return time.perf_counter() - start


def cpu_seconds() -> float:
    """User + system CPU time of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sha256sum(path: Path) -> float | None:
    if shutil.which("sha256sum") is None:
        return None
    start = time.perf_counter()
    subprocess.run(["sha256sum", str(path)], check=True, capture_output=True)
    return time.perf_counter() - start


def peak_rss_of_verify(path: Path) -> dict[str, float]:
    """Verify in a fresh process; its peak RSS (MiB) and its RSS before verifying."""
    # VmHWM is the peak RSS of this process image (ru_maxrss would carry the parent's over exec).
    code = (
        "import sys, json\n"
        "def hwm(key):\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith(key): return int(line.split()[1]) / 1024\n"
        "from sealtrace.container import verify_container\n"
        "before = hwm('VmHWM')\n"
        "verify_container(sys.argv[1])\n"
        "print(json.dumps({'before_mib': before, 'peak_mib': hwm('VmHWM')}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--tensor-mb", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="Where to write the containers (default: a temp dir).")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-container-", dir=args.dir))
    try:
        rows: list[tuple[str, str]] = []
        total = int(args.size_gb * 2**30)
        model = build_model(total, args.tensor_mb << 20)
        source = workdir / "big.onnx"
        onnx.save(model, source)  # type: ignore[arg-type]
        del model
        big = workdir / "big.seal"
        start = time.perf_counter()
        build_plan(source)
        plan_s = time.perf_counter() - start
        start = time.perf_counter()
        info = seal_model(source, big)
        seal_s = time.perf_counter() - start
        source.unlink()
        size = big.stat().st_size
        gb = size / 1e9
        verify_container(big)  # warm the page cache
        # Interleaved, best of each: other work on the machine hits both alike.
        verify_runs, one_thread_runs, single_runs, sum_runs = [], [], [], []
        verify_cpu = single_cpu = 0.0
        for _ in range(args.repeat):
            before = cpu_seconds()
            verify_runs.append(verify_container(big).seconds)
            verify_cpu += cpu_seconds() - before
            one_thread_runs.append(verify_container(big, workers=1).seconds)
            before = cpu_seconds()
            single_runs.append(sha256_single_thread(big))
            single_cpu += cpu_seconds() - before
            summed = sha256sum(big)
            if summed is not None:
                sum_runs.append(summed)
        verify_s, single_s = min(verify_runs), min(single_runs)
        sum_s = min(sum_runs) if sum_runs else None
        ratios = sorted(s / v for s, v in zip(single_runs, verify_runs, strict=True))

        small = workdir / "small.seal"
        seal_model(build_model(total // 8, args.tensor_mb << 20), small)  # type: ignore[arg-type]
        rss_small = peak_rss_of_verify(small)
        rss_big = peak_rss_of_verify(big)

        cpus = default_workers()
        rows.append(("container", f"{gb:.2f} GB, {info.tensors} tensors of {args.tensor_mb} MiB"))
        rows.append(("seal `model.onnx` (read, build Plan, hash, write, fsync)", f"{seal_s:.2f} s, {gb / seal_s:.2f} GB/s"))
        rows.append(("  of which `build_plan` alone", f"{plan_s:.2f} s (shape inference and weight copies)"))
        rows.append(("  seal without the Plan build", f"{seal_s - plan_s:.2f} s, {gb / (seal_s - plan_s):.2f} GB/s"))
        rows.append((f"verify ({cpus} threads, page cache)", f"{verify_s:.3f} s, **{gb / verify_s:.2f} GB/s**"))
        rows.append(("CPU time per GB: verify / sha256 1 thread",
                     f"{verify_cpu / args.repeat / gb:.3f} s / {single_cpu / args.repeat / gb:.3f} s "
                     f"(verify adds no hashing work; wall-clock gain needs idle cores)"))  # fmt: skip
        rows.append(("verify, 1 thread", f"{min(one_thread_runs):.3f} s, {gb / min(one_thread_runs):.2f} GB/s"))
        rows.append(("hashlib.sha256, 1 thread", f"{single_s:.3f} s, {gb / single_s:.2f} GB/s"))
        if sum_s is not None:
            rows.append(("`sha256sum` of the file", f"{sum_s:.3f} s, {gb / sum_s:.2f} GB/s"))
        rows.append(("verify speed / single-thread sha256", f"{single_s / verify_s:.2f}x best-to-best, "
                     f"{ratios[len(ratios) // 2]:.2f}x median of {len(ratios)} paired runs"))  # fmt: skip
        rows.append(
            ("peak RSS of a verify process", f"{rss_small['peak_mib']:.0f} MiB for {small.stat().st_size / 1e9:.2f} GB, "
             f"{rss_big['peak_mib']:.0f} MiB for {gb:.2f} GB (interpreter + imports: {rss_big['before_mib']:.0f} MiB)")
        )  # fmt: skip
        load = os.getloadavg()[0]
        lines = [
            "## Containers: seal and verify throughput",
            "",
            f"Command: `python benchmarks/bench_container.py --repeat {args.repeat}`. {platform.machine()}, "
            f"{cpus} CPU(s), Python {platform.python_version()}, load average {load:.1f} at the end.",
            "",
            "| measure | result |",
            "|---|---|",
            *(f"| {name} | {value} |" for name, value in rows),
            "",
        ]
        text = "\n".join(lines)
        print(text)
        results = Path(__file__).resolve().parent / "results"
        results.mkdir(exist_ok=True)
        (results / "container.md").write_text(text)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
