"""Directory manifests: sealtrace `manifest create/verify` against OpenSSF model-signing, side by side.

    python benchmarks/bench_manifest.py [--size-gb 1.0] [--shards 8] [--rounds 5] [--dir /tmp]

Two models of the same size, written with safetensors.numpy into a temp dir: one file (16 tensors
of 64 MiB for 1 GB) and a sharded directory (8 shards of 4 tensors, an index and a config). Each
tool signs and verifies with a local key (sealtrace: Ed25519 `create_manifest(sign_with=...)` and
`verify_manifest(trust=...)`; model-signing: its Python API, `signing.Config().use_elliptic_key_signer`
and `verifying.Config().use_elliptic_key_verifier`, as `model_signing sign key` / `verify key` do),
in this process, from a warm page cache (one untimed round first). Rounds alternate the order of the
tools; each figure is the median over the rounds. All tools hash sha256 on the same number of threads:
sealtrace's pool size, passed to model-signing as `max_workers`. model-signing is a benchmark-only
reference, not a dependency: without it (`pip install model-signing==1.1.1 pyopenssl`; 1.1.1 imports
OpenSSL without declaring it) its columns cannot be measured, and the script exits as skipped, leaving
results/manifest.md as it is (benchmarks/material.py: results are only rewritten from measurements).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from material import skip  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)
from sealtrace.container.manifest import create_manifest, verify_manifest  # noqa: E402
from sealtrace.hashpool import default_workers  # noqa: E402
from sealtrace.signing import generate_keypair  # noqa: E402

RESULTS = HERE / "results" / "manifest.md"
MS_SHARD = 64 << 20  # model-signing's shard size in its sharded configuration: sealtrace's chunk size


def write_models(root: Path, total: int, shards: int) -> tuple[Path, Path]:
    """One safetensors file of ``total`` bytes of tensors, and the same bytes as ``shards`` shards."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    single, sharded = root / "single", root / "sharded"
    single.mkdir()
    sharded.mkdir()
    tensor = 64 << 20
    count = max(1, total // tensor)
    save_file({f"layer{i}.weight": rng.random(tensor // 4, dtype=np.float32) for i in range(count)}, single / "model.safetensors")
    per_shard = max(1, count // shards)
    weight_map = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {f"layer{s * per_shard + i}.weight": rng.random(tensor // 4, dtype=np.float32) for i in range(per_shard)}
        save_file(part, sharded / name)
        weight_map.update(dict.fromkeys(part, name))
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (sharded / "config.json").write_text('{"model_type": "bench"}')
    return single, sharded


def cpu_seconds() -> float:
    """User + system CPU time of this process so far (all threads: both tools run in it)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sha256_one_thread(directory: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of hashlib.sha256 over every file, one thread, 1 MiB reads: the floor."""
    before, start = cpu_seconds(), time.perf_counter()
    for path in sorted(directory.iterdir()):
        digest = hashlib.sha256()
        with path.open("rb", buffering=0) as f:
            while block := f.read(1 << 20):
                digest.update(block)
    return time.perf_counter() - start, cpu_seconds() - before


def model_signing_steps(work: Path, threads: int) -> dict[str, tuple[Callable[[Path], None], Callable[[Path], None]]]:
    """(sign, verify) per model-signing configuration, with a local EC key (no Sigstore, no network)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from model_signing import hashing, signing, verifying

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = work / "ms.key", work / "ms.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    configs = {
        "files": lambda: hashing.Config().use_file_serialization(hashing_algorithm="sha256", max_workers=threads),
        "shards": lambda: hashing.Config().use_shard_serialization(hashing_algorithm="sha256", shard_size=MS_SHARD, max_workers=threads),
    }
    steps = {}
    for name, config in configs.items():
        def sign(model: Path, config: Callable[[], object] = config, name: str = name) -> None:
            signing.Config().use_elliptic_key_signer(private_key=private).set_hashing_config(config()).sign(
                model, work / f"{model.name}.{name}.sig"
            )

        def verify(model: Path, config: Callable[[], object] = config, name: str = name) -> None:
            verifying.Config().use_elliptic_key_verifier(public_key=public).set_hashing_config(config()).verify(
                model, work / f"{model.name}.{name}.sig"
            )

        steps[f"model-signing {name}"] = (sign, verify)
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gb", type=float, default=1.0)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None, help="Where to write the models (default: a temp dir).")
    args = parser.parse_args()
    try:
        import model_signing  # noqa: F401
    except ImportError as exc:  # 1.1.1 also imports OpenSSL (pyOpenSSL) without declaring it
        skip("bench_manifest.py", RESULTS, {
            "model-signing": f"the reference it is compared with ({exc}): pip install model-signing==1.1.1 pyopenssl"
        })  # fmt: skip
    threads = default_workers()
    work = Path(tempfile.mkdtemp(prefix="bench-manifest-", dir=args.dir))
    try:
        single, sharded = write_models(work, int(args.size_gb * 2**30), args.shards)
        st_key, st_pub = generate_keypair(work / "st.pem")

        def st_create(model: Path, version: int) -> None:
            create_manifest(model, work / f"{model.name}.v{version}.json", sign_with=[st_key], force=True, format_version=version)

        def st_verify(model: Path, version: int) -> None:
            assert verify_manifest(model, work / f"{model.name}.v{version}.json", trust=[st_pub], require_signature=True).ok

        tools: dict[str, tuple[Callable[[Path], None], Callable[[Path], None]]] = {
            "sealtrace": (lambda m: st_create(m, 2), lambda m: st_verify(m, 2)),
            **model_signing_steps(work, threads),
            "sealtrace format 1 (before)": (lambda m: st_create(m, 1), lambda m: st_verify(m, 1)),
        }
        models = {"single file": single, "sharded directory": sharded}
        times: dict[tuple[str, str, str], list[float]] = {}
        cpu: dict[tuple[str, str, str], list[float]] = {}
        floors: dict[str, list[tuple[float, float]]] = {name: [] for name in models}
        rng = random.Random(0)
        for round_ in range(args.rounds + 1):  # round 0 warms the page cache and the imports, untimed
            for model_name, model in models.items():
                floor = sha256_one_thread(model)
                order = list(tools)
                rng.shuffle(order)
                for step in ("create", "verify"):
                    for tool in order:
                        action = tools[tool][0 if step == "create" else 1]
                        before, start = cpu_seconds(), time.perf_counter()
                        action(model)
                        elapsed = time.perf_counter() - start
                        if round_:
                            times.setdefault((model_name, step, tool), []).append(elapsed)
                            cpu.setdefault((model_name, step, tool), []).append(cpu_seconds() - before)
                if round_:
                    floors[model_name].append(floor)
        sizes = {name: sum(p.stat().st_size for p in model.iterdir()) for name, model in models.items()}
        lines = render(args, threads, list(tools), times, cpu, floors, sizes, version("model-signing"))
        text = "\n".join(lines) + "\n"
        print(text)
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def render(
    args: argparse.Namespace,
    threads: int,
    tools: list[str],
    times: dict[tuple[str, str, str], list[float]],
    cpu: dict[tuple[str, str, str], list[float]],
    floors: dict[str, list[tuple[float, float]]],
    sizes: dict[str, int],
    ms_version: str,
) -> list[str]:
    med = {key: statistics.median(values) for key, values in times.items()}
    cpu_med = {key: statistics.median(values) for key, values in cpu.items()}
    ms_tools = [t for t in tools if t.startswith("model-signing")]
    lines = [
        "## Directory manifests: sealtrace against OpenSSF model-signing",
        "",
        f"Command: `python benchmarks/bench_manifest.py --size-gb {args.size_gb} --shards {args.shards} --rounds {args.rounds}`. "
        f"{platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()}, model-signing {ms_version}, "
        f"load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        f"Both models hold the same tensors, written with safetensors.numpy: one file of {sizes['single file'] / 1e9:.2f} GB "
        f"(64 MiB tensors), and {args.shards} shards of {sizes['sharded directory'] / args.shards / 1e9:.2f} GB with an index "
        "and a config. Each tool signs (`create`) and verifies with a local key, in this process, from the page cache; "
        f"every figure is the median of {args.rounds} rounds whose tool order is shuffled. Threads: sealtrace hashes on a "
        f"pool of {threads} (the cores it may use); model-signing gets `max_workers={threads}`: `files` is its default "
        "serialization (one file per thread, what `model_signing sign key` does), `shards` its sharded one with "
        f"{MS_SHARD >> 20} MiB shards (sealtrace's chunk size). All hash sha256. The floor is one thread of hashlib.sha256 "
        f"over the bytes, divided by {threads} threads.",
        "",
        "Wall-clock seconds (median), the floor, and model-signing's time over sealtrace's (> 1: sealtrace is faster):",
        "",
        "| model | step | " + " | ".join(tools) + " | floor | " + " | ".join(f"{t} / sealtrace" for t in ms_tools) + " |",
        "|---|---|" + "---|" * len(tools) + "---|" + "---|" * len(ms_tools),
    ]
    for model_name in floors:
        floor = statistics.median(wall for wall, _ in floors[model_name]) / threads
        for step in ("create", "verify"):
            cells = [f"{med[(model_name, step, t)]:.2f} s" for t in tools]
            cells[tools.index("sealtrace")] = f"**{cells[tools.index('sealtrace')]}**"
            ratios = [f"{med[(model_name, step, t)] / med[(model_name, step, 'sealtrace')]:.2f}x" for t in ms_tools]
            lines.append(f"| {model_name} | {step} | " + " | ".join(cells) + f" | {floor:.2f} s | " + " | ".join(ratios) + " |")
    lines += [
        "",
        "CPU seconds of the process (all threads, median): the work each tool does, which other jobs on the machine "
        "change far less than wall-clock time. The floor: one thread of hashlib.sha256 reading the same bytes.",
        "",
        "| model | step | " + " | ".join(tools) + " | floor |",
        "|---|---|" + "---|" * len(tools) + "---|",
    ]
    for model_name in floors:
        cpu_floor = statistics.median(c for _, c in floors[model_name])
        for step in ("create", "verify"):
            cells = " | ".join(f"{cpu_med[(model_name, step, t)]:.2f} s" for t in tools)
            lines.append(f"| {model_name} | {step} | {cells} | {cpu_floor:.2f} s |")
    misses = [
        f"{model_name} {step} against {t} ({med[(model_name, step, t)] / med[(model_name, step, 'sealtrace')]:.2f}x)"
        for model_name in floors for step in ("create", "verify") for t in ms_tools
        if med[(model_name, step, t)] <= med[(model_name, step, "sealtrace")]
    ]
    gb = sizes["single file"] / 1e9
    st_single = med[("single file", "verify", "sealtrace")]
    verdict = "met on every row" if not misses else "not met on " + "; ".join(misses)
    lines += [
        "",
        f"Target (issue 16): faster than model-signing on both models (wall-clock medians above): {verdict}. Each byte is "
        "hashed once (`create` did it twice before: the `format 1` column) and large files are split across cores; "
        f"sealtrace verifies the single file at {gb / st_single:.2f} GB/s here. Every tool does the same work per byte "
        "(CPU table: one sha256 pass over a copy from the page cache, at the one-thread floor), so what can separate them "
        "is how many cores each keeps busy: on an idle machine, sealtrace and model-signing's `shards` hash one file on "
        f"all {threads} threads and its default `files` on one. Where other jobs hold the cores (the load average above), "
        "Linux shares them per session (sched_autogroup), so a process gets its session's share whatever its thread "
        "count, and ratios near 1 are within the noise.",
    ]
    return lines


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
