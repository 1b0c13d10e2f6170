"""Re-signing a model directory with a hash cache after one file changed, against a full signing.

    PYTHONPATH=src python benchmarks/bench_incremental_sign.py [--files 8] [--mib 32]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from sealtrace.provenance import hashcache
from sealtrace.provenance.modelsig import sign_directory
from sealtrace.signing import generate_keypair


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--mib", type=int, default=32)
    args = parser.parse_args()
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
            sign_directory(model, key, work / name, cache_path=work / "hash.cache" if cache else None)
            return time.perf_counter() - start

        full = sign("full.sig", cache=False)
        sign("warm.sig", cache=True)  # fills the cache
        with (model / "shard-0.bin").open("r+b") as f:
            f.write(b"\xff")
        incremental = sign("incremental.sig", cache=True)
        total = args.files * args.mib
        print(f"{args.files} x {args.mib} MiB: full signing {full:.3f} s; re-signing after one file changed, "
              f"with the cache, {incremental:.3f} s ({full / incremental:.1f}x, {total} MiB vs {args.mib} MiB read)")


if __name__ == "__main__":
    main()
