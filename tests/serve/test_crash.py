"""Nothing lost: `sealtrace serve` (in turn `io`, `full` and `deferred`) is killed with SIGKILL at random
points under load, 20 times, and restarted each time. Afterwards the ledger verifies, every record id a
client got with a 200 is in it, no record is torn, and every tree head signed before a crash is
consistent with the ones after. On SQLite and on PostgreSQL. No process outlives a killed server
(replay workers, multiprocessing's resource tracker)."""

from __future__ import annotations

import contextlib
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

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the process tree from Linux's /proc")

KILLS = 20
CLIENTS = 3
MODES = ("io", "full", "deferred")


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
        child, url = _start(container, location, keys, MODES[round_ % len(MODES)])
        stop = threading.Event()
        clients = [threading.Thread(target=_load, args=(url, acknowledged, stop, round_ * 10 + i)) for i in range(CLIENTS)]
        for client in clients:
            client.start()
        time.sleep(rng.uniform(0.05, 0.4))
        head = _held_head(url)  # a head a client would keep: signed before the crash
        if head is not None:
            held.append(head)
        time.sleep(rng.uniform(0.0, 0.3))
        _kill_leaving_nothing(child)
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


def _descendants(pid: int) -> set[int]:
    """The processes under ``pid`` (from Linux's /proc)."""
    found: set[int] = set()
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            for child in map(int, children.read_text().split()):
                found |= {child} | _descendants(child)
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: it has exited, and only waits to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _kill_leaving_nothing(child: subprocess.Popen[str]) -> None:
    """SIGKILL the server; check that every process under it dies too, within seconds."""
    left = _descendants(child.pid)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    deadline = time.monotonic() + 10
    while left := {pid for pid in left if _alive(pid)}:
        assert time.monotonic() < deadline, f"process(es) {sorted(left)} outlived the killed server"
        time.sleep(0.05)


def test_a_killed_deferred_server_leaves_no_process_behind(tmp_path: Path, containers: dict[str, Path],
                                                           keys: tuple[Path, Path]) -> None:
    child, url = _start(containers["tiny"], str(tmp_path / "ledger.db"), keys, "deferred")
    try:
        document = {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0.0, 1.0, 2.0, 3.0]}]}
        assert httpx.post(f"{url}/v2/models/tiny/infer", json=document, timeout=10).status_code == 200
        deadline = time.monotonic() + 60
        while 'sealtrace_replays_total{model="tiny",verdict="identical"} 1.0' not in httpx.get(f"{url}/metrics").text:
            assert time.monotonic() < deadline, "the request was not replayed"
            time.sleep(0.05)
        assert len(_descendants(child.pid)) >= 2  # the replay worker and multiprocessing's resource tracker
    except BaseException:
        child.kill()
        raise
    _kill_leaving_nothing(child)
