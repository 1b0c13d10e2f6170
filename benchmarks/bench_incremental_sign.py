"""Re-signing a model directory with a hash cache after one file changed, against a full signing.

    python benchmarks/bench_incremental_sign.py [--files 8] [--mib 32] [--rounds 5]

Writes results/incremental-sign.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from sealtrace.provenance import hashcache
from sealtrace.provenance.modelsig import sign_directory
from sealtrace.signing import generate_keypair

RESULTS = Path(__file__).resolve().parent / "results" / "incremental-sign.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    full, incremental = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = work / "model"
        model.mkdir()
        for i in range(args.files):
            (model / f"shard-{i}.bin").write_bytes(os.urandom(args.mib << 20))
        key, _ = generate_keypair(work / "ec.pem", algorithm="ecdsa-p256")
        time.sleep(hashcache.RACY_NS / 1e9 + 0.1)  # files younger than the racy window are never cached

        def sign(name: str, cache: bool) -> float:
            start = time.perf_counter()
            sign_directory(model, key, work / name, cache_path=work / "hash.cache" if cache else None,
                           force=True)
            return time.perf_counter() - start

        for round_number in range(args.rounds):
            full.append(sign("full.sig", cache=False))
            sign("warm.sig", cache=True)  # fills the cache with every file as it is now
            with (model / f"shard-{round_number % args.files}.bin").open("r+b") as f:
                f.write(bytes([round_number]))
            time.sleep(hashcache.RACY_NS / 1e9 + 0.1)  # the changed file leaves the racy window
            incremental.append(sign("incremental.sig", cache=True))
    full_s, incremental_s = statistics.median(full), statistics.median(incremental)
    total = args.files * args.mib
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        "## Incremental signing of a model directory (model-signing bundles)\n\n"
        f"`python benchmarks/bench_incremental_sign.py --files {args.files} --mib {args.mib} --rounds {args.rounds}`: "
        f"`manifest sign` (the API, `sign_directory`) of {args.files} files of {args.mib} MiB, in full and with "
        "`--cache` after one byte of one file changed (the cache reuses a digest only where device, inode, size, "
        "mtime and ctime all match; docs/supply-chain.md). Page cache warm; medians of "
        f"{args.rounds} rounds.\n"
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared: other jobs ran beside it), "
        f"Python {platform.python_version()}.\n\n"
        "| signing | reads | seconds (median) |\n|---|---:|---:|\n"
        f"| full | {total} MiB | {full_s:.3f} |\n"
        f"| with the cache, one file changed | {args.mib} MiB | {incremental_s:.3f} |\n\n"
        f"Ratio: {full_s / incremental_s:.1f}x.\n"
    )
    print(f"full {full_s:.3f} s, incremental {incremental_s:.3f} s; wrote {RESULTS}")


if __name__ == "__main__":
    main()
