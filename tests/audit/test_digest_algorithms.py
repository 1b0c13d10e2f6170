"""Digest algorithms of audit logs (docs/audit-log.md, "Digest algorithm"): BLAKE3 logs (v2) and the
v1 logs written before v2 existed (tests/fixtures/v1, made by the code of c8ced0e), which must keep
verifying and replaying."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from blake3 import blake3

from sealtrace.audit import AuditRecorder, audited_run, replay_log, verify_log
from sealtrace.audit.capture import CapturedRun
from sealtrace.audit.diff import diff_runs
from sealtrace.audit.entries import tensor_entry
from sealtrace.audit.errors import AuditFormatError
from sealtrace.audit.records import value_summary
from sealtrace.cli import main
from sealtrace.digest import canonical_json, tensor_digest, tensor_digest_prefix
from sealtrace.errors import InputError
from sealtrace.session import Session
from tests.audit.test_entries import values

V1 = Path(__file__).resolve().parent.parent / "fixtures" / "v1"
MLP_X = {"x": np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)}


def _rewrite_header(log: Path, out: Path, change: dict[str, Any], algorithm: str) -> None:
    """``log`` with its header changed and every record re-digested with ``algorithm`` (a forger's log)."""
    from sealtrace.audit.records import seal_record

    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    records[0].update(change)
    prev = "0" * 64
    lines = []
    for seq, record in enumerate(records):
        record.pop("digest", None)
        record.pop("chain_head", None)
        lines.append(seal_record(record, seq, prev, algorithm))
        prev = record["chain_head" if record["type"] == "footer" else "digest"]
    out.write_bytes(b"".join(line + b"\n" for line in lines))


@pytest.mark.parametrize(
    ("log", "model", "feeds"),
    [
        ("mlp-onnx.jsonl", "mlp.onnx", None),
        ("mlp-seal-signed.jsonl", "mlp.seal", None),
        ("loop.jsonl", "loop.onnx", {"x": "loop_x.npy"}),
        ("ext-seal.jsonl", "ext.seal", None),
    ],
)
def test_v1_logs_of_earlier_sealtrace_verify_and_replay(log: str, model: str, feeds: dict[str, str] | None) -> None:
    inputs = {k: np.load(V1 / v) for k, v in feeds.items()} if feeds else None
    trust = V1 / "key.pub" if "signed" in log else None
    verification = verify_log(V1 / log, model=V1 / model, inputs=inputs or MLP_X, trust=trust)
    assert verification.ok, verification.problems
    assert verification.digest_algorithm == "sha256"
    assert verification.records[0]["format"] == "sealtrace.audit.v1"
    report = replay_log(V1 / log, V1 / model, inputs)
    # Logs written before portable numerics: native numerics, whose bits depended on the host and
    # on that sealtrace's kernels. The replay says so and measures the difference, rather than
    # failing where it need not reproduce the bits (docs/numerics.md, "Logs of native numerics").
    assert report.numerics == "native" and not report.bit_identity_expected
    assert report.host_differences[0].startswith("by an earlier sealtrace")
    assert report.passed or (
        report.deviations and all(d.within_tolerance for d in report.deviations)
    ), report.summary()


def test_v1_capture_reads_back_and_diffs_against_its_log() -> None:
    run = CapturedRun.open(V1 / "mlp-capture")
    assert run.digest_algorithm == "sha256"
    assert np.array_equal(run.load("x"), MLP_X["x"])
    assert diff_runs(V1 / "mlp-capture", V1 / "mlp-seal-signed.jsonl").passed


def test_sha256_logs_are_still_written_as_v1(tmp_path: Path) -> None:
    audited_run(Session(V1 / "mlp.onnx"), MLP_X, audit=tmp_path / "a.jsonl")
    header = json.loads((tmp_path / "a.jsonl").read_bytes().splitlines()[0])
    assert header["format"] == "sealtrace.audit.v1" and "digest_algorithm" not in header


def test_blake3_log_is_v2_and_every_digest_is_blake3(tmp_path: Path) -> None:
    log = tmp_path / "b.jsonl"
    audited_run(Session(V1 / "mlp.seal"), MLP_X, audit=log, digest="blake3")
    records = [json.loads(line) for line in log.read_bytes().splitlines()]
    header, footer = records[0], records[-1]
    assert header["format"] == "sealtrace.audit.v2" and header["digest_algorithm"] == "blake3"
    # Record digests: BLAKE3 over the canonical JSON without the digest field.
    for record in records:
        own = "chain_head" if record["type"] == "footer" else "digest"
        body = {k: v for k, v in record.items() if k not in (own, "signature")}
        assert record[own] == blake3(canonical_json(body)).hexdigest()
    # Tensor digests: BLAKE3 over the same canonical encoding sha256 hashes in v1.
    x = MLP_X["x"]
    expected = blake3(tensor_digest_prefix(x.dtype, x.shape) + x.tobytes()).hexdigest()
    assert header["inputs"][0]["digest"] == expected
    # Weights that steps read are logged by their BLAKE3 digests too; the Plan digest stays sha256.
    matmul = records[1]
    weight = next(i for i in matmul["inputs"] if i["name"] == "w")
    assert len(weight["digest"]) == 64 and weight["digest"] != header["inputs"][0]["digest"]
    assert footer["chain_head"] == verify_log(log).run_digest
    assert verify_log(log, model=V1 / "mlp.seal", inputs=MLP_X).ok
    assert not verify_log(log, inputs={"x": x + 1}).ok
    assert replay_log(log, V1 / "mlp.seal").passed


@pytest.mark.parametrize("sample", [0, 3])
def test_blake3_fast_entries_equal_the_general_path(sample: int) -> None:
    for value in values():
        head, tail, digest = tensor_entry(value, sample, "blake3")
        summary = value_summary(value, sample, "blake3")
        assert head + '""' + tail == canonical_json({"name": "", **summary}).decode("ascii")
        assert digest == summary["digest"]
        if isinstance(value, np.ndarray) and value.dtype.kind in "fiub":
            assert digest == tensor_digest(value, "blake3") != tensor_digest(value)


def test_blake3_log_with_helpers_and_large_outputs(tmp_path: Path) -> None:
    from tests.audit.test_recorder import _big_chain

    size = 1 << 17  # 512 KiB per output: past the helpers' threshold
    model, feeds = _big_chain(12, size), {"v0": np.zeros(size, np.float32)}
    log = tmp_path / "big.jsonl"
    recorder = AuditRecorder(log, digest="blake3", hash_threads=2, max_pending_bytes=1 << 20)
    audited_run(Session(model), feeds, audit=recorder)
    assert verify_log(log).ok
    assert replay_log(log, model, feeds).passed


def test_edited_algorithm_is_a_failed_check_and_an_unknown_one_bad_input(tmp_path: Path) -> None:
    log = tmp_path / "b.jsonl"
    audited_run(Session(V1 / "mlp.onnx"), MLP_X, audit=log, digest="blake3")
    lines = log.read_bytes().splitlines(keepends=True)
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(lines[0].replace(b'"blake3"', b'"sha256"') + b"".join(lines[1:]))
    result = verify_log(edited)
    assert not result.ok and result.problems[0].line == 1 and "edited" in result.problems[0].message
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_bytes(lines[0].replace(b'"blake3"', b'"md5"') + b"".join(lines[1:]))
    with pytest.raises(AuditFormatError, match="digest algorithm 'md5'"):
        verify_log(unknown)
    # A forger's v1 header naming an algorithm, or a v2 header naming none, consistently re-digested:
    # the schema refuses both.
    v1_named = tmp_path / "v1-named.jsonl"
    _rewrite_header(log, v1_named, {"format": "sealtrace.audit.v1", "digest_algorithm": "sha256"}, "sha256")
    assert "schema" in verify_log(v1_named).problems[0].message
    v2_unnamed = tmp_path / "v2-unnamed.jsonl"
    _rewrite_header(V1 / "mlp-onnx.jsonl", v2_unnamed, {"format": "sealtrace.audit.v2"}, "sha256")
    assert "schema" in verify_log(v2_unnamed).problems[0].message
    # ... and a v2 header naming sha256 is a valid log.
    v2_sha = tmp_path / "v2-sha.jsonl"
    _rewrite_header(V1 / "mlp-onnx.jsonl", v2_sha, {"format": "sealtrace.audit.v2", "digest_algorithm": "sha256"}, "sha256")
    assert verify_log(v2_sha).ok


def test_blake3_capture_is_v3_and_diff_refuses_mixed_algorithms(tmp_path: Path) -> None:
    audited_run(Session(V1 / "mlp.onnx"), MLP_X, audit=tmp_path / "b.jsonl", capture=tmp_path / "cap", digest="blake3")
    index = json.loads((tmp_path / "cap" / "index.json").read_text())
    assert index["format"] == "sealtrace.capture.v3" and index["digest_algorithm"] == "blake3"
    assert CapturedRun.open(tmp_path / "cap").load("y").shape == (1, 3)
    assert diff_runs(tmp_path / "cap", tmp_path / "b.jsonl").passed
    with pytest.raises(InputError, match="cannot be compared"):
        diff_runs(tmp_path / "cap", V1 / "mlp-onnx.jsonl")
    # v1 and v2 indexes are sha256: naming an algorithm there is malformed.
    shutil.copytree(V1 / "mlp-capture", tmp_path / "v1cap")
    v1_index = json.loads((tmp_path / "v1cap" / "index.json").read_text())
    (tmp_path / "v1cap" / "index.json").write_text(json.dumps({**v1_index, "digest_algorithm": "blake3"}))
    with pytest.raises(InputError, match="digest_algorithm"):
        CapturedRun.open(tmp_path / "v1cap")


def test_cli_run_digest_blake3_then_verify_and_replay(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    np.save(tmp_path / "x.npy", MLP_X["x"])
    seal, x = str(V1 / "mlp.seal"), f"x={tmp_path / 'x.npy'}"
    assert main(["run", seal, "--input", x, "--audit", str(log), "--digest", "blake3"]) == 0
    assert main(["audit", "verify", str(log), "--container", seal, "--input", x]) == 0
    assert main(["replay", str(log), "--container", seal]) == 0
    assert main(["run", seal, "--input", x, "--digest", "blake3"]) == 2  # --digest without --audit or --capture
