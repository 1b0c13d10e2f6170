"""The independent Go verifier on a >= 1 GB container, next to sealtrace verify and sha256sum.

    .venv/bin/python benchmarks/bench_verifier.py [--size-gb 1.0] [--tensor-mb 64] [--repeat 5] [--dir /tmp]

Builds verifier/ with ``go build``, seals a model of ``--size-gb`` of float32 weights, warms the page
cache, then times, interleaved (other work on the machine hits all alike; best and median of each):
``sealverify container`` (a fresh process: start-up included; all cores, and GOMAXPROCS=1),
``sealtrace verify`` (a fresh process, and ``verify_container`` in this process, whose time excludes the
interpreter's start), and ``sha256sum``. Peak RSS of each verifier process is measured too. Writes
benchmarks/results/verifier.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

from sealtrace.container import seal_model, verify_container

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_container import build_model  # benchmarks/ is a folder of scripts, not a package

ROOT = Path(__file__).resolve().parents[1]

# Runs a command and prints its wall time and its peak RSS (the child's ru_maxrss, KiB on Linux).
_TIMED = (
    "import json, resource, subprocess, sys, time\n"
    "start = time.perf_counter()\n"
    "done = subprocess.run(sys.argv[1:], capture_output=True)\n"
    "seconds = time.perf_counter() - start\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024\n"
    "print(json.dumps({'seconds': seconds, 'rss_mib': rss, 'code': done.returncode}))\n"
)


def timed(command: list[str], env: dict[str, str] | None = None) -> dict[str, float]:
    """Wall seconds and peak RSS (MiB) of one fresh process running ``command``."""
    out = subprocess.run([sys.executable, "-c", _TIMED, *command], capture_output=True, text=True, check=True,
                         env=env)  # fmt: skip
    result: dict[str, float] = json.loads(out.stdout)
    if result["code"] != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result['code']}")
    return result


def build_sealverify(out: Path) -> Path:
    binary = out / "sealverify"
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=ROOT / "verifier", check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))  # fmt: skip
    return binary


def go_sha256_speed() -> float:
    """crypto/sha256 on one core from memory, MB/s (verifier/container_test.go, BenchmarkSHA256)."""
    out = subprocess.run(["go", "test", "-run", "XXX", "-bench", "SHA256", "-benchtime", "2s", "."],
                         cwd=ROOT / "verifier", capture_output=True, text=True, check=True).stdout  # fmt: skip
    line = next(line for line in out.splitlines() if line.startswith("BenchmarkSHA256"))
    return float(line.split()[-2])


def go_version() -> str:
    return subprocess.run(["go", "version"], capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--tensor-mb", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=None, help="Where to write the container (default: a temp dir).")
    args = parser.parse_args()
    if shutil.which("go") is None:
        sys.exit("go not found (Debian/Ubuntu: apt-get install golang-go)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-verifier-", dir=args.dir))
    try:
        binary = build_sealverify(workdir)
        source = workdir / "big.onnx"
        onnx.save(build_model(int(args.size_gb * 2**30), args.tensor_mb << 20), source)  # type: ignore[arg-type]
        big = workdir / "big.seal"
        info = seal_model(source, big)
        source.unlink()
        gb = big.stat().st_size / 1e9
        go_cmd = [str(binary), "container", str(big)]
        py_cmd = [sys.executable, "-m", "sealtrace", "verify", str(big)]
        one_core = dict(os.environ, GOMAXPROCS="1")
        timed(go_cmd)  # warm the page cache (and check the container verifies)
        runs: dict[str, list[dict[str, float]]] = {"go": [], "go1": [], "py": [], "sum": []}
        in_process: list[float] = []
        for _ in range(args.repeat):
            runs["go"].append(timed(go_cmd))
            runs["go1"].append(timed(go_cmd, env=one_core))
            runs["py"].append(timed(py_cmd, env=dict(os.environ, PYTHONPATH=str(ROOT / "src"))))
            in_process.append(verify_container(big).seconds)
            runs["sum"].append(timed(["sha256sum", str(big)]))

        def cell(name: str) -> str:
            seconds = [r["seconds"] for r in runs[name]]
            best, median = min(seconds), statistics.median(seconds)
            rss = max(r["rss_mib"] for r in runs[name])
            return f"{best:.3f} s ({gb / best:.2f} GB/s); median {median:.3f} s | {rss:.0f} MiB"

        go_hash = go_sha256_speed()
        cpus = os.cpu_count()
        rows = [
            (f"`sealverify container` ({cpus} cores: goroutines, 1 MiB pread blocks)", cell("go")),
            ("`sealverify container`, GOMAXPROCS=1", cell("go1")),
            ("`sealtrace verify` (a process: interpreter start and imports included)", cell("py")),
            ("`verify_container` in a running Python (the hashing itself)",
             f"{min(in_process):.3f} s ({gb / min(in_process):.2f} GB/s); median {statistics.median(in_process):.3f} s | -"),
            ("`sha256sum` (one core)", cell("sum")),
            ("Go's crypto/sha256, one core, from memory (`go test -bench SHA256`)", f"{go_hash / 1000:.2f} GB/s | -"),
        ]  # fmt: skip
        load = os.getloadavg()[0]
        lines = [
            "## The independent verifier: `sealverify container` on a 1 GB container",
            "",
            f"Command: `python benchmarks/bench_verifier.py --size-gb {args.size_gb} --repeat {args.repeat}`. "
            f"Container: {gb:.2f} GB, {info.tensors} tensors of {args.tensor_mb} MiB, page cache warm. "
            f"{platform.machine()}, {cpus} CPU(s), {go_version()}, Python {platform.python_version()}; "
            f"load average {load:.1f} at the end. Best and median of {args.repeat} interleaved runs; peak RSS "
            f"of the process.",
            "",
            "| command | wall time (throughput) | peak RSS |",
            "|---|---|---|",
            *(f"| {name} | {value} |" for name, value in rows),
            "",
            "Every command reads the whole file and hashes every byte. sealverify checks what `sealtrace verify`",
            "checks (docs/container-format.md, 'Verification'): the header, its digest, the layout, the signatures,",
            "every chunk of every tensor, the padding and the graph references.",
            "",
            "Where the time goes: hashing. Go 1.19 (Debian's golang-go) has no SHA-NI code in crypto/sha256 (Go",
            "added it in 1.21), so one core hashes at the speed the last row shows, while sealtrace's hashlib",
            "(OpenSSL) uses SHA-NI at some 1.8 GB/s per core; sealverify still spreads the chunks over every core,",
            "and beats `sha256sum`, which has no SHA-NI either. Built with Go 1.21 or later, the same code uses",
            "SHA-NI. Memory stays flat: one 1 MiB buffer per goroutine, no memory map.",
            "",
        ]
        text = "\n".join(lines)
        print(text)
        results = Path(__file__).resolve().parent / "results"
        results.mkdir(exist_ok=True)
        (results / "verifier.md").write_text(text)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
