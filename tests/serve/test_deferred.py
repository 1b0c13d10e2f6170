"""--audit deferred: every answer is replayed on the reference backend with the full per-op audit and a
linked replay record says whether it agreed; divergences are flagged, counted and shown; the backlog
drains, and what a stop leaves unreplayed resumes from the ledger on the next start."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sealtrace.backends.onnxruntime import OnnxRuntimeBackend
from sealtrace.ledger import Ledger
from sealtrace.serve import InferenceService, ServeConfig
from sealtrace.serve.replay import WORKER_DEATHS, ReplayJob, replay_in_worker
from tests.serve.conftest import serving
from tests.serve.test_app import _json_request

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)


class SkewedBackend:
    """ONNX Runtime with every float output moved by 0.5: what a broken fast backend would serve."""

    name = "skewed-onnxruntime"
    needs_kernels = False

    def __init__(self) -> None:
        self.inner = OnnxRuntimeBackend()

    @property
    def version(self) -> str:
        return self.inner.version

    def run(self, plan: Any, feeds: Mapping[str, Any], observers: Sequence[Any] = ()) -> dict[str, Any]:
        return {k: v + np.float32(0.5) for k, v in self.inner.run(plan, feeds, observers).items()}


def _replays(ledger: Ledger) -> dict[str, list[dict[str, Any]]]:
    """Replay links by the record they replay."""
    found: dict[str, list[dict[str, Any]]] = {}
    for _, record in ledger.records():
        for link in record["links"]:
            found.setdefault(link["record"], []).append({**link, "replay": record})
    return found


def test_every_answer_gets_a_linked_replay(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    with serving(tmp_path, [containers["tiny"]], keys, audit="deferred") as client:
        ids = []
        for i in range(4):
            response = client.post("/v2/models/tiny/infer", json=_json_request(X * i))
            assert response.status_code == 200, response.text
            ids.append(response.json()["parameters"]["record_id"])
        service: InferenceService = client.service
        assert service.replay is not None and service.replay.drain(120)  # the backlog drains after the load
        replays = _replays(service.ledger)
        for record_id in ids:
            (link,) = replays[record_id]
            assert link["verdict"] in ("identical", "within-tolerance")
            replay = link["replay"]
            assert replay["kind"] == "replay" and replay["audit"] == "full" and replay["backend"]["name"] == "reference"
            assert service.ledger.trail(replay["trail"]).count(b'"type":"step"') == 3  # the full per-op audit
            _, original = service.ledger.record(record_id)
            assert replay["inputs"] == original["inputs"] and original["audit"] == "deferred"
        metrics = client.get("/metrics").text
        assert "sealtrace_replay_backlog 0.0" in metrics
        assert 'sealtrace_divergences_total{model="tiny"} 0.0' in metrics


def test_a_divergence_is_flagged_counted_and_shown(tmp_path: Path, containers: dict[str, Path], keys: Any,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sealtrace.serve")
    with serving(tmp_path, [containers["tiny"]], keys, audit="deferred", backend=SkewedBackend()) as client:
        response = client.post("/v2/models/tiny/infer", json=_json_request(X))
        record_id = response.json()["parameters"]["record_id"]
        service: InferenceService = client.service
        assert service.replay is not None and service.replay.drain(120)
        (link,) = _replays(service.ledger)[record_id]
        assert link["verdict"] == "diverged" and "output 'y'" in link["detail"]
        assert 'sealtrace_divergences_total{model="tiny"} 1.0' in client.get("/metrics").text
        page = client.get("/ledger").text
        assert record_id in page and "diverged" in page
        assert any("DIVERGENCE" in r.message and record_id in r.message for r in caplog.records)


def test_the_backlog_resumes_from_the_ledger_after_a_stop(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    location = str(tmp_path / "ledger.db")
    config = ServeConfig(models=[str(containers["tiny"])], ledger=location, trust=[str(keys[1])],
                         sign_key=str(keys[0]), audit="deferred", replay_drain_seconds=0)
    service = InferenceService(config)
    from fastapi.testclient import TestClient

    from sealtrace.serve import create_app

    with TestClient(create_app(service)) as client:  # the lifespan's end stops it without draining
        ids = [client.post("/v2/models/tiny/infer", json=_json_request(X + i)).json()["parameters"]["record_id"]
               for i in range(6)]
    with Ledger.open(location, readonly=True) as ledger:
        left = [i for i in ids if i not in _replays(ledger)]
    restarted = InferenceService(config)
    try:
        assert restarted.replay is not None and restarted.replay.drain(120)
        replays = _replays(restarted.ledger)
        for record_id in ids:
            (link,) = replays[record_id]  # exactly one replay each, before or after the restart
            assert link["verdict"] in ("identical", "within-tolerance"), link
        assert restarted.replay.stats.done == len(left)
    finally:
        restarted.close()
    with Ledger.open(location, readonly=True) as ledger:
        assert ledger.verify([keys[1]]).ok


def _metric(text: str, line_start: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(line_start + " ")]
    return float(line.rsplit(" ", 1)[1])


def test_a_replay_worker_killed_while_idle_is_replaced(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    with serving(tmp_path, [containers["tiny"]], keys, audit="deferred") as client:
        service: InferenceService = client.service
        assert service.replay is not None
        assert client.post("/v2/models/tiny/infer", json=_json_request(X)).status_code == 200
        assert service.replay.drain(120)
        pool = service.replay._pool
        (pid,) = pool._processes  # the worker, idle now
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not pool._broken:  # the pool notices the death, as it would between two requests
            assert time.monotonic() < deadline, "the pool did not notice its worker's death"
            time.sleep(0.01)
        ids = [client.post("/v2/models/tiny/infer", json=_json_request(X * i)).json()["parameters"]["record_id"]
               for i in range(3)]
        assert service.replay.drain(120)
        replays = _replays(service.ledger)
        for record_id in ids:
            (link,) = replays[record_id]
            assert link["verdict"] in ("identical", "within-tolerance"), link
        metrics = client.get("/metrics").text
        assert sum(_metric(metrics, f'sealtrace_replays_total{{model="tiny",verdict="{v}"}}')
                   for v in ("identical", "within-tolerance")) == 4
        assert _metric(metrics, "sealtrace_replay_worker_restarts_total") == 1
        assert _metric(metrics, "sealtrace_replay_backlog") == 0
        assert "replay workers restarted 1 time(s)" in client.get("/ledger").text


POISON = 13.0  # a request holding this value kills its replay worker (see _replay_or_die)


def _replay_or_die(job: ReplayJob) -> Any:
    """The worker's replay, except that a poisoned request kills the worker, as an OOM kill would."""
    if job.feeds is not None and (job.feeds["x"] == POISON).any():
        os.kill(os.getpid(), signal.SIGKILL)
    return replay_in_worker(job)


def test_a_record_whose_replay_kills_the_worker_ends_as_failed(tmp_path: Path, containers: dict[str, Path], keys: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sealtrace.serve.replay.replay_in_worker", _replay_or_die)
    with serving(tmp_path, [containers["tiny"]], keys, audit="deferred") as client:
        service: InferenceService = client.service
        assert service.replay is not None
        poisoned = X.copy()
        poisoned[0, 0] = POISON
        ids = [client.post("/v2/models/tiny/infer", json=_json_request(x)).json()["parameters"]["record_id"]
               for x in (X, poisoned, X + 1)]
        assert service.replay.drain(120)
        replays = _replays(service.ledger)
        (link,) = replays[ids[1]]
        assert link["verdict"] == "failed" and f"died {WORKER_DEATHS} times" in link["detail"]
        for record_id in (ids[0], ids[2]):  # replayed, even when they were in the worker it killed
            (link,) = replays[record_id]
            assert link["verdict"] in ("identical", "within-tolerance"), link
        # Replays go on, on a pool started after the last death (pools restart when the next replay starts).
        after = client.post("/v2/models/tiny/infer", json=_json_request(X + 2)).json()["parameters"]["record_id"]
        assert service.replay.drain(120) and _replays(service.ledger)[after][0]["verdict"] != "failed"
        metrics = client.get("/metrics").text
        assert _metric(metrics, 'sealtrace_replays_total{model="tiny",verdict="failed"}') == 1
        assert _metric(metrics, "sealtrace_replay_worker_restarts_total") == WORKER_DEATHS
        assert _metric(metrics, "sealtrace_replay_backlog") == 0


@pytest.mark.parametrize(("audit", "says"), [
    ("io", "inputs and outputs are digested and recorded; requests are not replayed"),
    ("full", "per-op audit trail is recorded with its record, on the critical path; nothing is replayed"),
    ("deferred", "0 record(s) waiting for a replay: 0 queued, 0 running, 0 left in the ledger for the next start"),
])
def test_the_ledger_page_says_what_the_audit_mode_does(tmp_path: Path, containers: dict[str, Path], keys: Any,
                                                       audit: str, says: str) -> None:
    backend = "reference" if audit == "full" else "onnxruntime"
    with serving(tmp_path, [containers["tiny"]], keys, audit=audit, backend=backend) as client:
        page = client.get("/ledger").text
        assert says in page
        assert ("every replay so far agrees" in page) == (audit == "deferred")
