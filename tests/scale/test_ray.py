"""On a multi-node Ray cluster (simulated on this machine): the same records as without Ray, and jobs
that finish, with every record exactly once, when a worker process or a whole node is lost mid-job."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import onnx
import pytest

from sealtrace.audit.log import parse_lines
from sealtrace.ledger import Ledger
from sealtrace.scale import BatchJob, InProcess, RayExecutor, run_batch
from sealtrace.scale.batch import batch_record_id
from tests.scale.conftest import copy_dataset, records_of, verify_ok

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.ray]


def _job(material: dict[str, Path], ledger: Path, model: str = "tiny", **options: Any) -> BatchJob:
    return BatchJob(str(material[model]), str(material[f"{model}_data"]), str(ledger),
                    sign_key=str(material["key"]), **options)


def _steps(location: Path, run_digest: str) -> list[dict[str, Any]]:
    """A stored trail's step records without what names the run (chain digests cover its header)."""
    with Ledger.open(str(location), readonly=True) as ledger:
        lines = parse_lines(ledger.trail(run_digest))
    return [{k: v for k, v in line.record.items() if k not in ("digest", "prev")}
            for line in lines if line.record is not None and line.record["type"] == "step"]


def _same_records(a: Path, b: Path, full: bool) -> None:
    first, second = records_of(a), records_of(b)
    assert len(first) == len(second) > 0
    for x, y in zip(first, second, strict=True):
        # Field by field, all but the time (and a trail's run digest: its header names the run).
        drop = {"time", "trail"} if full else {"time"}
        assert {k: v for k, v in x.items() if k not in drop} == {k: v for k, v in y.items() if k not in drop}
        if full:
            assert _steps(a, x["trail"]) == _steps(b, y["trail"])  # every step's output digests equal


@pytest.mark.parametrize(("model", "audit"), [("tiny", "io"), ("chain", "full")])
def test_the_same_records_with_and_without_ray(ray_cluster: Any, material: dict[str, Path], tmp_path: Path,
                                               model: str, audit: str) -> None:
    local = run_batch(_job(material, tmp_path / "local.db", model, audit=audit, task_size=5), InProcess())
    executor = RayExecutor(ray_cluster.address)
    clustered = run_batch(_job(material, tmp_path / "ray.db", model, audit=audit, task_size=5), executor)
    assert clustered.job_id == local.job_id and clustered.recorded == local.recorded
    assert len({name.split(":")[0] for name in clustered.workers}) == 2  # both nodes ran tasks
    _same_records(tmp_path / "local.db", tmp_path / "ray.db", full=audit == "full")
    verify_ok(tmp_path / "ray.db", material["pub"])


def _lost_midway(material: dict[str, Path], tmp_path: Path, lose: Any, workers: int) -> Any:
    """A chain-model job of 24 requests, 2 a task; ``lose(outcome)`` is asked at each outcome, in
    position order, until it returns what it lost."""
    lost: list[Any] = []

    def outcome(result: Any) -> None:
        if not lost:
            what = lose(result)
            if what:
                lost.append(what)

    job = _job(material, tmp_path / "l.db", "chain", audit="full", task_size=2)
    summary = run_batch(job, RayExecutor("auto", workers=workers), on_outcome=outcome)
    assert lost, f"the job ended before anything was lost ({dict(summary.workers)})"
    assert (summary.recorded, summary.failures) == (24, [])
    ids = [r["id"] for r in records_of(tmp_path / "l.db")]
    assert ids == [batch_record_id(summary.job_id, p) for p in range(24)]  # each once, in position order
    verify_ok(tmp_path / "l.db", material["pub"])
    local = run_batch(_job(material, tmp_path / "local.db", "chain", audit="full", task_size=2), InProcess())
    assert local.job_id == summary.job_id
    _same_records(tmp_path / "local.db", tmp_path / "l.db", full=True)
    return summary


def _warm(node_id: str) -> None:
    """Start a worker process on the node, sealtrace imported, before the job: a new node's first
    worker takes longer to start than this small job takes to run."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    def load() -> str:
        import sealtrace.scale.batch  # noqa: F401

        return "warm"

    pinned = NodeAffinitySchedulingStrategy(node_id, soft=False)
    assert ray.get(ray.remote(num_cpus=1, scheduling_strategy=pinned)(load).remote()) == "warm"


def test_a_node_lost_mid_job(ray_cluster: Any, material: dict[str, Path], tmp_path: Path) -> None:
    doomed = ray_cluster.add_node(num_cpus=1)
    ray_cluster.wait_for_nodes()
    _warm(doomed.node_id)
    prefix = f"node {doomed.node_id[:8]}:"

    def lose(outcome: Any) -> str | None:
        # Once the node has run a task of the job (it holds more: six tasks are in flight on three
        # CPUs), its raylet and workers are killed at once.
        if not outcome.worker.startswith(prefix):
            return None
        ray_cluster.remove_node(doomed, allow_graceful=False)
        return str(doomed.node_id)

    summary = _lost_midway(material, tmp_path, lose, workers=3)
    after = [name for name in summary.workers if name.startswith(prefix)]
    assert after and sum(summary.workers[name] for name in after) < 24  # the other nodes finished the job


def test_a_worker_process_lost_mid_task(ray_cluster: Any, material: dict[str, Path], tmp_path: Path) -> None:
    psutil = pytest.importorskip("psutil")

    def lose(outcome: Any) -> int:
        # A Ray worker running a task names itself after the task's function: kill one that is.
        for process in psutil.process_iter(["pid", "cmdline"]):
            if (process.info["cmdline"] or [""])[0].startswith("ray::run_batch_task"):
                os.kill(process.info["pid"], signal.SIGKILL)
                return int(process.info["pid"])
        return 0  # none running this instant: try at the next outcome

    summary = _lost_midway(material, tmp_path, lose, workers=2)
    assert summary.recorded == 24


def test_ledger_replay_the_same_with_and_without_ray(ray_cluster: Any, material: dict[str, Path], tmp_path: Path) -> None:
    from sealtrace.scale.replay import LedgerReplay, replay_ledger

    run_batch(_job(material, tmp_path / "a.db", audit="full"), InProcess())
    run_batch(_job(material, tmp_path / "b.db", audit="full"), InProcess())
    replay = {"containers": (str(material["tiny"]),), "sign_key": str(material["key"]), "task_size": 5}
    local = replay_ledger(LedgerReplay(str(tmp_path / "a.db"), **replay), InProcess())
    clustered = replay_ledger(LedgerReplay(str(tmp_path / "b.db"), **replay), RayExecutor("auto"))
    assert local.verdicts == clustered.verdicts == {"identical": 12}
    first, second = records_of(tmp_path / "a.db")[12:], records_of(tmp_path / "b.db")[12:]
    # The replayed records' ids are the same in both (same job, same dataset): so are the replays'.
    assert [r["links"] for r in first] == [r["links"] for r in second]
    assert [r["id"] for r in first] == [r["id"] for r in second]
    assert [r["outputs"] for r in first] == [r["outputs"] for r in second]
    verify_ok(tmp_path / "b.db", material["pub"])


def test_falsify_sweep_the_same_results_with_and_without_ray(ray_cluster: Any, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    from sealtrace.falsify import SearchSettings
    from sealtrace.falsify.instances import read_instances, run_instances
    from sealtrace.scale.sweep import sweep_instances
    from tests.falsify.conftest import SAFE, VIOLATED, toy_network

    onnx.save(toy_network(), tmp_path / "toy.onnx")
    (tmp_path / "violated.vnnlib").write_text(VIOLATED)
    (tmp_path / "safe.vnnlib").write_text(SAFE)
    (tmp_path / "i.csv").write_text("toy.onnx,violated.vnnlib,5\ntoy.onnx,safe.vnnlib,0.5\nmissing.onnx,safe.vnnlib,1\n")
    instances = read_instances(tmp_path / "i.csv")
    settings = SearchSettings(seed=3)
    local = run_instances(instances, settings=settings)
    clustered = sweep_instances(instances, RayExecutor("auto"), settings=settings)

    def comparable(results: list[Any]) -> list[tuple[Any, ...]]:
        return [(r.instance, r.result, r.certified, r.counterexample, r.error) for r in results]

    assert comparable(local) == comparable(clustered)
    assert [r.result for r in clustered] == ["sat", "unknown", "error"]
    assert clustered[0].counterexample is not None and clustered[0].run_digest  # certified on the worker

    from sealtrace.cli import main

    assert main(["falsify-bench", str(tmp_path / "i.csv"), "--seed", "3", "--json", "--ray", ray_cluster.address]) == 1
    table = json.loads(capsys.readouterr().out)["results"]
    assert [(row["result"], row["certified"]) for row in table] == [("sat", "yes"), ("unknown", "no"), ("error", "no")]


def test_batch_command_on_the_cluster(ray_cluster: Any, material: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from sealtrace.cli import main

    data = copy_dataset(material["tiny_data"], tmp_path / "data")
    argv = ["batch", str(material["tiny"]), str(data), "--ledger", str(tmp_path / "l.db"), "--sign",
            str(material["key"]), "--task-size", "4", "--ray", ray_cluster.address]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "12 recorded" in out and "Ray cluster" in out
    assert main(["ledger", "verify", str(tmp_path / "l.db"), "--trust", str(material["pub"])]) == 0
