"""Nothing lost: `sealtrace serve` is killed with SIGKILL at random points under load, 20 times, and
restarted each time. Afterwards the ledger verifies, every record id a client got with a 200 is in it,
no record is torn, and every tree head signed before a crash is consistent with the ones after.
On SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from sealtrace.ledger import Ledger, TreeHead, check_proof, trusted_keys
from tests.serve.conftest import ROOT, postgres_location

KILLS = 20
CLIENTS = 3


def _start(container: Path, location: str, keys: tuple[Path, Path], audit: str, extra: tuple[str, ...] = (),
           stderr: list[str] | None = None) -> tuple[subprocess.Popen[str], str]:
    """`sealtrace serve` on a free port (with ``extra`` options); its URL. The lines it writes to
    stderr after the `serving on` line go to ``stderr`` when given."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "OPENBLAS_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "sealtrace", "serve", str(container), "--ledger", location, "--sign", str(keys[0]),
               "--trust", str(keys[1]), "--audit", audit, "--backend", "reference" if audit == "full" else "onnxruntime",
               "--port", "0", "--head-every", "7", "--head-interval", "0.05", "--log-level", "warning", *extra]
    child = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert child.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = child.stderr.readline()
        if not line:
            break
        found = re.search(r"serving on (http://\S+)", line)
        if found:
            drain = child.stderr.read if stderr is None else lambda: stderr.extend(child.stderr)  # type: ignore[arg-type]
            threading.Thread(target=drain, daemon=True).start()  # keep the pipe drained
            return child, found.group(1)
    child.kill()
    raise AssertionError(f"the server did not start: {child.stderr.read()[-2000:]}")


def _load(url: str, acknowledged: list[str], stop: threading.Event, seed: int) -> None:
    """Send requests until the server dies (or ``stop``); keep the record id of every 200."""
    rng = np.random.default_rng(seed)
    with httpx.Client(base_url=url, timeout=10.0) as client:
        for _ in range(5000):  # bounded
            if stop.is_set():
                return
            x = rng.standard_normal((1, 4)).astype(np.float32)
            document = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": x.reshape(-1).tolist()}]}
            try:
                response = client.post("/v2/models/tiny/infer", json=document)
            except httpx.HTTPError:
                return  # killed
            assert response.status_code == 200, response.text
            acknowledged.append(response.json()["parameters"]["record_id"])


def _held_head(url: str) -> TreeHead | None:
    try:
        response = httpx.get(f"{url}/v2/ledger/tree-head", timeout=5.0)
    except httpx.HTTPError:
        return None
    return TreeHead.from_json(response.json(), "held") if response.status_code == 200 else None


def _crash_and_restart(location: str, container: Path, keys: tuple[Path, Path]) -> None:
    rng = random.Random(15)
    acknowledged: list[str] = []
    held: list[TreeHead] = []
    for round_ in range(KILLS):
        child, url = _start(container, location, keys, "full" if round_ % 2 else "io")
        stop = threading.Event()
        clients = [threading.Thread(target=_load, args=(url, acknowledged, stop, round_ * 10 + i)) for i in range(CLIENTS)]
        for client in clients:
            client.start()
        time.sleep(rng.uniform(0.05, 0.4))
        head = _held_head(url)  # a head a client would keep: signed before the crash
        if head is not None:
            held.append(head)
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        stop.set()
        for client in clients:
            client.join(timeout=30)
    assert len(acknowledged) > KILLS and held
    with Ledger.open(location, signer=keys[0]) as ledger:  # a last start signs what the last crash left
        report = ledger.verify([keys[1]], known=held)
        assert report.ok and report.unsigned == 0, report.problems
        stored = {record["id"] for _, record in ledger.records()}
        missing = [record_id for record_id in acknowledged if record_id not in stored]
        assert not missing, f"{len(missing)} acknowledged record(s) lost, e.g. {missing[0]}"
        final = ledger.latest_tree_head()
        assert final is not None
        trusted = trusted_keys([keys[1]])
        for head in held:
            check_proof(ledger.prove_consistency(head.tree_size, final.tree_size), trusted)


@pytest.mark.slow
def test_sigkill_under_load_loses_nothing_sqlite(tmp_path: Path, containers: dict[str, Path], keys: tuple[Path, Path]) -> None:
    _crash_and_restart(str(tmp_path / "ledger.db"), containers["tiny"], keys)


@pytest.mark.slow
def test_sigkill_under_load_loses_nothing_postgres(postgres_server: str, containers: dict[str, Path],
                                                   keys: tuple[Path, Path]) -> None:
    _crash_and_restart(postgres_location(postgres_server), containers["tiny"], keys)
