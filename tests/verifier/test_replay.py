"""``sealverify replay`` (issue 30): the Go verifier re-executes sealtrace's audit logs with its own kernels,
written from docs/numerics.md, and must agree bit for bit. A sample of the replay family here (a few ACAS
Xu networks); every network in ``make verifier-corpus``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from sealtrace import Session
from sealtrace.audit import audited_run
from sealtrace.backends.reference import ReferenceBackend
from sealtrace.container import seal_model
from sealtrace.signing import generate_keypair
from sealtrace.zoo import ACASXU_NETWORKS, acasxu_file
from tests.conftest import make_model, mlp_model, require_material
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


def test_every_operator_at_the_hard_places_replays_bit_identical(sealverify: Path, tmp_path: Path) -> None:
    """Sums that the float64 bound cannot decide (a tie, an exact zero, an overflow), where sealverify
    forms the exact value in math/big, and every operator of stage (a), against sealtrace's log."""
    tie = float(np.float32(2.0**-24))
    w = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 2]], dtype=np.float32)  # x . w: 1 + 2^-24, 1 - 1, 2e38
    # Gemm's third element: 0.5 * (2e38 * 2), whose sum alone is past float32's range but not its result.
    b = np.array([[1, -1, 0], [0.5, 0.25, 0], [0, 0, 2]], dtype=np.float32)
    weights = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
               numpy_helper.from_array(np.array([tie, 1e-45, 0], dtype=np.float32), "c"),
               numpy_helper.from_array(np.array([3.0], dtype=np.float32), "three"),
               numpy_helper.from_array(np.array([-1, 1], dtype=np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
             helper.make_node("Gemm", ["m", "b", "c"], ["g"], name="gemm", alpha=0.5, beta=2.0, transB=1),
             helper.make_node("Mul", ["g", "three"], ["p"], name="mul"),
             helper.make_node("Div", ["p", "three"], ["q"], name="div"),
             helper.make_node("Sub", ["q", "m"], ["d"], name="sub"),
             helper.make_node("Add", ["d", "g"], ["e"], name="add"),
             helper.make_node("Relu", ["e"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["s"], name="reshape"),
             helper.make_node("Flatten", ["s"], ["y"], name="flatten", axis=0)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    container = tmp_path / "hard.seal"
    seal_model(model, container)
    x = np.array([[1.0, tie, -1.0, 1e38]], dtype=np.float32)
    log = tmp_path / "hard.jsonl"
    audited_run(Session(str(container)), {"x": x}, audit=log)
    done = run(sealverify, "replay", str(log), "--container", str(container))
    assert done.returncode == 0, done.stderr
    assert "bit-identical: 9 step(s)" in done.stdout


def test_replay_refuses_what_it_cannot_reproduce_and_fails_another_model(sealverify: Path, tmp_path: Path) -> None:
    x = np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32)
    container, other = tmp_path / "mlp.seal", tmp_path / "other.seal"
    seal_model(mlp_model(), container)
    seal_model(mlp_model(scale=2.0), other)
    portable, native = tmp_path / "portable.jsonl", tmp_path / "native.jsonl"
    audited_run(Session(str(container)), {"x": x}, audit=portable)
    audited_run(Session(str(container), backend=ReferenceBackend(numerics="native")), {"x": x}, audit=native)

    assert run(sealverify, "replay", str(portable), "--container", str(container)).returncode == 0
    refused = run(sealverify, "replay", str(native), "--container", str(container))
    assert refused.returncode == 2 and "native numerics" in refused.stderr
    wrong = run(sealverify, "replay", str(portable), "--container", str(other), "--json")
    verdict = json.loads(wrong.stdout)
    assert wrong.returncode == 1 and verdict["failures"][0] == {**verdict["failures"][0], "kind": "line", "where": 1}
    assert run(sealverify, "replay", str(portable)).returncode == 2  # --container is required


def _atan_run(tmp_path: Path) -> tuple[Path, Path, np.ndarray]:
    model = make_model([helper.make_node("Atan", ["x"], ["y"], name="angle")],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    container = tmp_path / "atan.seal"
    seal_model(model, container)
    x = np.array([[0.5, -1.0, 2.0]], dtype=np.float32)
    log = tmp_path / "atan.jsonl"
    audited_run(Session(str(container)), {"x": x}, audit=log, sample=1)
    return container, log, x


def test_an_operator_replay_does_not_run_is_refused_by_name(sealverify: Path, tmp_path: Path) -> None:
    container, log, x = _atan_run(tmp_path)
    feeds = tmp_path / "feeds.npz"
    np.savez(feeds, x=x)
    done = run(sealverify, "replay", str(log), "--container", str(container), "--inputs", str(feeds))
    assert done.returncode == 2 and not done.stdout
    assert "operator Atan" in done.stderr and done.stderr.count("\n") == 1


def test_replay_needs_the_inputs_the_log_does_not_hold(sealverify: Path, tmp_path: Path) -> None:
    container, log, _ = _atan_run(tmp_path)  # a sample of 1 value: the input is not in the log
    done = run(sealverify, "replay", str(log), "--container", str(container))
    assert done.returncode == 2 and "--inputs" in done.stderr
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip")
    done = run(sealverify, "replay", str(log), "--container", str(container), "--inputs", str(bad))
    assert done.returncode == 2 and "npz" in done.stderr


def test_trust_refuses_a_container_or_log_no_trusted_key_signed(sealverify: Path, tmp_path: Path) -> None:
    """``--trust`` means what it means to ``sealtrace replay``: what ran and what was logged are both
    signed by one of these keys, or the replay fails (exit 1) before a step runs."""
    key, other = tmp_path / "k.pem", tmp_path / "other.pem"
    generate_keypair(key)
    generate_keypair(other)
    x = np.array([[0.5, -1.0, 2.0, 0.25]], dtype=np.float32)
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp_model().SerializeToString())
    signed, unsigned = tmp_path / "signed.seal", tmp_path / "unsigned.seal"
    seal_model(model, signed, key)
    seal_model(model, unsigned)
    logs = {}
    for name, what, sign in [("both", signed, key), ("log_only", unsigned, key), ("model_only", signed, None),
                             ("onnx", model, key)]:
        logs[name] = tmp_path / f"{name}.jsonl"
        audited_run(Session(str(what)), {"x": x}, audit=logs[name], sign_key=sign)

    def replay(log: str, container: Path, trusted: Path) -> subprocess.CompletedProcess[str]:
        return run(sealverify, "replay", str(logs[log]), "--container", str(container),
                   "--trust", str(trusted.with_suffix(".pub")), "--json")

    done = replay("both", signed, key)
    verdict = json.loads(done.stdout)
    assert done.returncode == 0 and verdict["ok"], done.stdout
    assert verdict["signers"] and all(s["trusted"] for s in verdict["signers"])
    for log, container, trusted, where in [("both", signed, other, "trusted signature"),
                                           ("log_only", unsigned, key, "trusted signature"),
                                           ("onnx", model, key, "trusted signature"),
                                           ("model_only", signed, key, None)]:
        done = replay(log, container, trusted)
        failure = json.loads(done.stdout)["failures"][0]
        assert done.returncode == 1, (log, done.stdout)
        if where is None:  # the model is trusted, the log is not signed: its footer line is named
            assert failure["kind"] == "line" and "not signed" in failure["what"]
        else:
            assert (failure["kind"], failure["where"]) == ("signature", where)
