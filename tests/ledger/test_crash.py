"""SIGKILL in the middle of appends: every append that returned is in the ledger, nothing is torn, and the
ledger verifies after it is reopened (which signs what the killed writer left unsigned)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

from sealtrace.ledger import Ledger, TreeHead

WRITER = """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
from sealtrace.ledger import Ledger
from tests.ledger.conftest import make_record

ledger = Ledger.open(sys.argv[1], signer=sys.argv[2], head_every=7)
lock = threading.Lock()

def append(i):
    receipt = ledger.append(make_record(i))
    with lock:
        print(receipt.record_id, flush=True)

with ThreadPoolExecutor(8) as pool:
    list(pool.map(append, range(100_000)))
"""


def test_appends_that_returned_survive_sigkill(location: str, keys: tuple[Path, Path]) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    acknowledged: list[str] = []
    held: list[TreeHead] = []
    rng = random.Random(0)
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", WRITER, location, str(keys[0])], env=env,
                                 stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        for _ in range(rng.randrange(20, 120)):
            line = child.stdout.readline()
            assert line, "the writer stopped by itself"
            acknowledged.append(line.strip())
        child.send_signal(signal.SIGKILL)
        acknowledged += [line.strip() for line in child.stdout]  # acknowledged before the kill landed
        child.wait()
        with Ledger.open(location, signer=keys[0]) as ledger:  # reopening signs the unsigned tail
            report = ledger.verify([keys[1]], known=held)
            assert report.ok and report.unsigned == 0, report.problems
            for record_id in acknowledged:
                ledger.record(record_id)
            latest = ledger.latest_tree_head()
            assert latest is not None
            held.append(latest)
