"""`make acasxu`: the ACAS Xu benchmark of VNN-COMP 2021 (45 networks, 10 properties, 186 instances),
pinned to one commit of the competition's benchmark repository and checked file by file.

Where: $SEALTRACE_ACASXU_DIR, else the shared copy beside the checkout (../shared/data/acasxu) where that
folder exists, else .testmodels/acasxu: the order sealtrace.zoo looks in. Files already there are
verified against SHA256SUMS (beside this script); missing ones are downloaded from the pinned commit,
each verified before any is moved into place. A file that is there but differs is reported and left
alone, never replaced.

    python benchmarks/acasxu/fetch.py [--dir DIR] [--check]

Exit 0: all 56 files present and matching; 1: a file differs, is missing (--check), or could not be
downloaded; 2: bad usage. Needs nothing but Python's standard library (no sealtrace, no venv).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
REPOSITORY = "stanleybak/vnncomp2021"
# The repository's last commit; benchmarks/acasxu is unchanged since 79af0d7a (2021-06-06).
COMMIT = "90419aadcf06cf543ce5c1706cae1059dc9fa6cf"
URL = f"https://raw.githubusercontent.com/{REPOSITORY}/{COMMIT}/benchmarks/acasxu"
# Every file is 56 KB at most: a response larger than this is not one of them (and is not read whole).
MAX_BYTES = 1 << 20


class FetchError(Exception):
    """A file differs from its pinned checksum, or could not be downloaded."""


def default_dir() -> Path:
    chosen = os.environ.get("SEALTRACE_ACASXU_DIR")
    if chosen:
        return Path(chosen)
    shared = ROOT.parent / "shared" / "data" / "acasxu"
    return shared if shared.is_dir() else ROOT / ".testmodels" / "acasxu"


def pinned() -> dict[str, str]:
    """File name -> sha256, from SHA256SUMS (the `sha256sum` format)."""
    sums = {}
    for line in (HERE / "SHA256SUMS").read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            sums[name] = digest
    return sums


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(url: str, target: Path, expected: str) -> None:
    """``url`` into ``target``, refused unless its sha256 is ``expected``."""
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read(MAX_BYTES + 1)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"cannot download {url}: {reason} (no network? see README.md, 'Test material')") from None
    if len(data) > MAX_BYTES:
        raise FetchError(f"{url}: larger than {MAX_BYTES} bytes, not the pinned file")
    digest = hashlib.sha256(data).hexdigest()
    if digest != expected:
        raise FetchError(f"{url}: sha256 {digest}, pinned {expected}")
    target.write_bytes(data)


def fetch(folder: Path, base_url: str, check_only: bool) -> str:
    """Verify what ``folder`` holds and download what it lacks; returns the line to print."""
    sums = pinned()
    differ = [name for name in sums if (folder / name).is_file() and sha256(folder / name) != sums[name]]
    if differ:
        raise FetchError(
            f"{len(differ)} file(s) in {folder} differ from the pinned sha256 ({', '.join(differ[:3])}"
            f"{', ...' if len(differ) > 3 else ''}); remove them and run again to download them"
        )
    missing = [name for name in sums if not (folder / name).is_file()]
    if missing and check_only:
        raise FetchError(f"{len(missing)} of {len(sums)} files missing in {folder} (first: {missing[0]})")
    if missing:
        print(f"downloading {len(missing)} file(s) of {REPOSITORY}@{COMMIT[:8]} into {folder}", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        # Everything lands in a temporary folder first: a failure leaves no partial set behind.
        staging = Path(tempfile.mkdtemp(prefix=".fetch-", dir=folder))
        try:
            for name in missing:
                download(f"{base_url}/{name}", staging / name, sums[name])
            for name in missing:
                os.replace(staging / name, folder / name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return (
        f"ACAS Xu (VNN-COMP 2021, {REPOSITORY}@{COMMIT[:8]}): {len(sums)} files in {folder} match "
        f"benchmarks/acasxu/SHA256SUMS" + (f" ({len(missing)} downloaded)" if missing else "")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="where the files are or go (default: see above)")
    parser.add_argument("--check", action="store_true", help="only verify; never download")
    parser.add_argument("--url", default=os.environ.get("SEALTRACE_ACASXU_URL", URL),
                        help="where to download from: a mirror of the pinned folder (default: the pinned commit)")
    args = parser.parse_args(argv)
    folder = args.dir or default_dir()
    if folder.exists() and not folder.is_dir():
        print(f"fetch.py: error: {folder} is not a folder", file=sys.stderr)
        return 2
    try:
        print(fetch(folder, args.url.rstrip("/"), args.check))
    except FetchError as exc:
        print(f"fetch.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
