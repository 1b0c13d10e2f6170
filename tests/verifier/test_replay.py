"""``sealverify replay`` (issue 30): the Go verifier re-executes sealtrace's audit logs with its own kernels,
written from docs/numerics.md, and must agree bit for bit. A sample of the replay family here (a few ACAS
Xu networks); every network in ``make verifier-corpus``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from sealtrace import Session
from sealtrace.audit import audited_run
from sealtrace.container import seal_model
from sealtrace.zoo import ACASXU_NETWORKS, acasxu_file
from tests.conftest import make_model, require_material
from tests.verifier.replay_corpus import compare, make_cases

# Networks from both ends of the set, and one between.
SAMPLE_NETWORKS = [ACASXU_NETWORKS[0], ACASXU_NETWORKS[22], ACASXU_NETWORKS[-1]]


def run(sealverify: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(sealverify), *args], capture_output=True, text=True, check=False)


def test_acasxu_logs_replay_bit_identical_and_an_edited_step_is_caught(sealverify: Path, tmp_path: Path) -> None:
    for network in SAMPLE_NETWORKS:
        require_material(lambda network=network: acasxu_file(network))
    cases = make_cases(tmp_path, SAMPLE_NETWORKS, runs=3)
    problems, _, _ = compare(sealverify, cases, tmp_path)
    assert not problems, "\n".join(problems)
    assert {c.differing_line is None for c in cases} == {True, False}
    assert any(c.inputs for c in cases)  # inputs from an .npz as well as from the log's samples

    edited = next(c for c in cases if c.differing_line is not None)
    done = run(sealverify, *(arg for arg in edited.args() if arg != "--json"))
    assert done.returncode == 1 and f"line {edited.differing_line}: step " in done.stderr
    assert done.stderr.count("\n") == 1

    identical = cases[0]
    done = run(sealverify, *identical.args())
    verdict = json.loads(done.stdout)
    assert done.returncode == 0 and verdict["ok"] and verdict["check"] == "replay" and verdict["failures"] == []
    assert len(verdict["digests"]["run"]) == 64


def _tanh_run(tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    model = make_model([helper.make_node("Tanh", ["x"], ["y"], name="squash")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    container = tmp_path / "tanh.seal"
    seal_model(model, container)
    x = np.array([[0.5, -1.0, 2.0]], dtype=np.float32)
    log = tmp_path / "tanh.jsonl"
    audited_run(Session(str(container)), {"x": x}, audit=log, sample=1)
    return container, log, x


def test_an_operator_replay_does_not_run_is_refused_by_name(sealverify: Path, tmp_path: Path) -> None:
    container, log, x = _tanh_run(tmp_path)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=x)
    done = run(sealverify, "replay", str(log), "--container", str(container), "--inputs", str(feeds))
    assert done.returncode == 2 and not done.stdout
    assert "operator Tanh" in done.stderr and done.stderr.count("\n") == 1


def test_replay_needs_the_inputs_the_log_does_not_hold(sealverify: Path, tmp_path: Path) -> None:
    container, log, _ = _tanh_run(tmp_path)  # a sample of 1 value: the input is not in the log
    done = run(sealverify, "replay", str(log), "--container", str(container))
    assert done.returncode == 2 and "--inputs" in done.stderr
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip")
    done = run(sealverify, "replay", str(log), "--container", str(container), "--inputs", str(bad))
    assert done.returncode == 2 and "npz" in done.stderr
