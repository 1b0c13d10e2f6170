"""Seal and verify on a 1 GB model with external data, side by side with a durable copy of its bytes.

    .venv/bin/python benchmarks/bench_container.py [--size-gb 1.0] [--tensor-mb 64] [--repeat 3] [--dir /tmp]

The model is the issue-16 one: a MatMul chain over square float32 weights (16 of 64 MiB for 1 GB),
saved with external data. In one run, rounds alternating in shuffled order:

- a durable copy of the model's files (``shutil.copyfile`` + ``fsync``): the floor of any writer;
- ``seal`` (sealtrace.container.stream: one pass, pread, three sha256 streams on three threads),
  each in a fresh process, which also gives its peak RSS (VmHWM);
- ``sealtrace verify`` as a process (start-up included) and its import time (``-X importtime``).

Then the loading writer (what ``seal`` did before the one-pass path: read every file whole, decode
and hash from memory) once, in a fresh process, for its time and peak RSS; and verify throughput in
process against single-thread sha256. The page cache is warm throughout (every file is read once
before timing). Writes a markdown table to results/container.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import platform
import random
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

from sealtrace.container import describe_container, verify_container
from sealtrace.hashpool import default_workers


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


def sha256_single_thread(path: Path) -> tuple[float, float]:
    """Seconds (wall, CPU of this thread) for one hashlib.sha256 over the whole mapped file."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        start, cpu = time.perf_counter(), time.thread_time()
        hashlib.sha256(m).hexdigest()
        return time.perf_counter() - start, time.thread_time() - cpu


def sha256sum(path: Path) -> float | None:
    if shutil.which("sha256sum") is None:
        return None
    start = time.perf_counter()
    subprocess.run(["sha256sum", str(path)], check=True, capture_output=True)
    return time.perf_counter() - start


def cpu_seconds() -> float:
    """User + system CPU time of this process so far (all threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def durable_copy(files: list[Path], target: Path) -> tuple[float, float]:
    """Seconds (wall, CPU) to copy ``files`` into ``target`` and fsync each copy: what writing the bytes costs."""
    start, cpu = time.perf_counter(), cpu_seconds()
    for file in files:
        copy = target / file.name
        shutil.copyfile(file, copy)
        fd = os.open(copy, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    for file in files:
        (target / file.name).unlink()
    return seconds, cpu


_PROCESS_ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"), "OPENBLAS_NUM_THREADS": "1"}

# VmHWM is the peak RSS of this process image (ru_maxrss would carry the parent's over exec).
_HWM = (
    "import json, resource, sys, time\n"
    "def cpu():\n"
    "    usage = resource.getrusage(resource.RUSAGE_SELF)\n"
    "    return usage.ru_utime + usage.ru_stime\n"
    "def hwm():\n"
    "    for line in open('/proc/self/status'):\n"
    "        if line.startswith('VmHWM'): return int(line.split()[1]) / 1024\n"
)


def seal_process(source: Path, out: Path, loading_writer: bool = False) -> dict[str, float]:
    """Seal in a fresh process: its seal seconds, whole-process seconds, peak RSS and RSS before sealing."""
    if loading_writer:
        # What seal did before the one-pass path: the model and every external file read whole.
        work = (
            "from sealtrace.container import writer\n"
            "from sealtrace.plan.modelfile import read_model_file\n"
            "before = hwm(); start = time.perf_counter(); cpu0 = cpu()\n"
            "read = read_model_file(sys.argv[1])\n"
            "record = {'file_name': read.path.name, 'sha256': read.sha256, 'size': read.size,\n"
            "          'external_data': [f.to_json() for f in read.external_data]}\n"
            "writer._seal_loaded(read.model, record, None, sys.argv[2], [], True, 16 << 20, None)\n"
        )
    else:
        work = (
            "from sealtrace.container import seal_model\n"
            "import sealtrace.plan  # start-up (the kernels' import) is timed as the process's, not the seal's\n"
            "before = hwm(); start = time.perf_counter(); cpu0 = cpu()\n"
            "seal_model(sys.argv[1], sys.argv[2], force=True)\n"
        )
    code = _HWM + work + (
        "print(json.dumps({'seal_s': time.perf_counter() - start, 'cpu_s': cpu() - cpu0, 'peak_mib': hwm(), "
        "'before_mib': before}))\n"
    )
    begin = time.perf_counter()
    out_text = subprocess.run(
        [sys.executable, "-c", code, str(source), str(out)], check=True, capture_output=True, text=True, env=_PROCESS_ENV
    ).stdout
    result: dict[str, float] = json.loads(out_text.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - begin
    return result


def verify_process(path: Path) -> float:
    """Seconds of `python -m sealtrace verify PATH`, start-up included."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sealtrace", "verify", str(path)], check=True, capture_output=True, env=_PROCESS_ENV)
    return time.perf_counter() - start


def verify_import_seconds(path: Path) -> tuple[float, list[str]]:
    """Import time of `sealtrace verify` (-X importtime: the top-level imports' cumulative time), and
    which of the heavy packages it imported."""
    code = (
        "import sys\nfrom sealtrace.cli import main\n"
        f"main(['verify', {str(path)!r}])\n"
        "heavy = ['sealtrace.plan', 'sealtrace.ops', 'sealtrace.session', 'onnxruntime', 'torch', 'rich', 'onnx', 'numpy']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], check=True, capture_output=True, text=True, env=_PROCESS_ENV
    )
    total_us = 0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|", 2)
            if not name[1:].startswith(" ") and cumulative.strip().isdigit():  # a top-level import
                total_us += int(cumulative)
    imported = done.stdout.strip().splitlines()[-1].split(",")
    return total_us / 1e6, [m for m in imported if m]


def peak_rss_of_verify(path: Path) -> dict[str, float]:
    """Verify in a fresh process; its peak RSS (MiB) and its RSS before verifying."""
    code = (
        _HWM + "from sealtrace.container import verify_container\n"
        "before = hwm()\n"
        "verify_container(sys.argv[1])\n"
        "print(json.dumps({'before_mib': before, 'peak_mib': hwm()}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(path)], check=True, capture_output=True, text=True, env=_PROCESS_ENV)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--tensor-mb", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="Where to write the models and containers (default: a temp dir).")
    parser.add_argument("--no-loading-writer", action="store_true", help="Skip the one run of the loading writer (3 GB of memory).")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-container-", dir=args.dir))
    try:
        total = int(args.size_gb * 2**30)
        model = build_model(total, args.tensor_mb << 20)
        source = workdir / "big.onnx"
        onnx.save(model, source, save_as_external_data=True, all_tensors_to_one_file=True,  # type: ignore[arg-type]
                  location="big.onnx.data", size_threshold=1024)  # fmt: skip
        del model
        files = [source, workdir / "big.onnx.data"]
        source_bytes = sum(f.stat().st_size for f in files)
        copies = workdir / "copies"
        copies.mkdir()
        big = workdir / "big.seal"
        for f in files:  # warm the page cache
            sha256_single_thread(f)
        copy_runs: list[float] = []
        copy_cpu: list[float] = []
        seal_runs: list[dict[str, float]] = []
        rng = random.Random(0)
        for _ in range(args.repeat):
            order = ["copy", "seal"]
            rng.shuffle(order)
            for what in order:
                if what == "copy":
                    wall, cpu = durable_copy(files, copies)
                    copy_runs.append(wall)
                    copy_cpu.append(cpu)
                else:
                    big.unlink(missing_ok=True)  # freeing the last round's container is not this round's work
                    seal_runs.append(seal_process(source, big))
        ratios = [s["seal_s"] / c for s, c in zip(seal_runs, copy_runs, strict=True)]
        copy_s = median(copy_runs)
        seal_s = median([s["seal_s"] for s in seal_runs])
        seal_peak = max(s["peak_mib"] for s in seal_runs)
        loading = None if args.no_loading_writer else seal_process(source, workdir / "loading.seal", loading_writer=True)
        same_bytes = loading is not None and (workdir / "loading.seal").read_bytes() == big.read_bytes()
        if loading is not None:
            (workdir / "loading.seal").unlink()
        size = big.stat().st_size
        gb = size / 1e9
        info = describe_container(big)

        verify_container(big)  # warm the page cache
        verify_runs, one_thread_runs, single_runs, single_cpu, process_runs = [], [], [], [], []
        for _ in range(args.repeat):
            verify_runs.append(verify_container(big).seconds)
            one_thread_runs.append(verify_container(big, workers=1).seconds)
            wall, cpu = sha256_single_thread(big)
            single_runs.append(wall)
            single_cpu.append(cpu)
            process_runs.append(verify_process(big))
        verify_s, single_s, sha_cpu = median(verify_runs), median(single_runs), median(single_cpu)
        import_s, heavy = verify_import_seconds(big)
        sum_s = sha256sum(big)
        rss_verify = peak_rss_of_verify(big)

        cpus = default_workers()
        target = 1.3
        rows: list[tuple[str, str]] = [
            ("model", f"{source_bytes / 1e9:.2f} GB: `big.onnx` + external data, {len(info['tensors'])} tensors of {args.tensor_mb} MiB"),
            ("durable copy of the model's files (copy + fsync)", f"{copy_s:.2f} s (median of {len(copy_runs)})"),
            ("**seal** (one pass: read once, 3 sha256 streams, write, fsync)",
             f"**{seal_s:.2f} s**, {gb / seal_s:.2f} GB/s (median of {len(seal_runs)}, in a fresh process each, after its "
             f"imports; the whole process: {median([s['process_s'] for s in seal_runs]):.2f} s)"),
            ("seal / durable copy", f"**{median(ratios):.2f}x** median of {len(ratios)} paired rounds "
             f"({min(ratios):.2f}x..{max(ratios):.2f}x); target <= {target}x: "
             f"{'met' if median(ratios) <= target else 'not met'}"),
            ("CPU time (user + system, all threads): seal / copy",
             f"{median([s['cpu_s'] for s in seal_runs]):.2f} s / {median(copy_cpu):.2f} s (what a busy machine's wall "
             "times follow)"),
            ("floor the v1 format sets: 3 sha256 streams (file, chunks, Plan digest)",
             f"3 x {sha_cpu:.2f} s of CPU = {3 * sha_cpu:.2f} s (sha256 of the container, one thread's CPU time): on {cpus} idle "
             f"cores at least {3 * sha_cpu / cpus:.2f} s of wall, where the copy needs {median(copy_cpu):.2f} s of CPU"),
            ("peak RSS of a seal process", f"**{seal_peak:.0f} MiB** (interpreter + imports: {seal_runs[0]['before_mib']:.0f} MiB); "
             f"target <= 256 MB ({256e6 / 2**20:.0f} MiB): {'met' if seal_peak * 2**20 <= 256e6 else 'not met'}"),
        ]  # fmt: skip
        if loading is not None:
            rows.append(("before: the loading writer (whole files read, weights decoded and hashed from memory)",
                         f"{loading['seal_s']:.2f} s, peak RSS {loading['peak_mib']:.0f} MiB; "
                         f"container bytes {'identical' if same_bytes else 'DIFFERENT'}"))  # fmt: skip
        rows += [
            ("`sealtrace verify` as a process (start-up included)", f"**{median(process_runs):.2f} s** (median of {len(process_runs)})"),
            ("  of which imports (`-X importtime`)", f"{import_s:.2f} s; heavy modules imported: {', '.join(heavy) or 'none'} "
             "(onnx parses the graph section; numpy comes with it)"),
            (f"verify in process ({cpus} threads, page cache)", f"{verify_s:.3f} s, **{gb / verify_s:.2f} GB/s**"),
            ("verify, 1 thread", f"{median(one_thread_runs):.3f} s, {gb / median(one_thread_runs):.2f} GB/s"),
            ("hashlib.sha256 of the container, 1 thread", f"{single_s:.3f} s, {gb / single_s:.2f} GB/s"),
        ]  # fmt: skip
        if sum_s is not None:
            rows.append(("`sha256sum` of the container", f"{sum_s:.3f} s, {gb / sum_s:.2f} GB/s"))
        rows.append(("peak RSS of a verify process", f"{rss_verify['peak_mib']:.0f} MiB for {gb:.2f} GB "
                     f"(interpreter + imports: {rss_verify['before_mib']:.0f} MiB)"))  # fmt: skip
        load = os.getloadavg()
        lines = [
            "## Containers: seal and verify",
            "",
            f"Command: `python benchmarks/bench_container.py --repeat {args.repeat}`. {platform.machine()}, "
            f"{cpus} CPU(s), Python {platform.python_version()}, load average {load[0]:.1f} / {load[1]:.1f} "
            f"(1 / 5 min) at the end: the machine is shared, so rounds alternate in shuffled order and "
            "figures are medians of paired rounds.",
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
