"""Seed material for the fuzz suite: one small, valid instance of every format sealtrace reads.

Everything is made by sealtrace itself from a tiny model, so the seeds are exactly what users hold:
a signed container, a signed audit log of a run of it, two captures of the same run, an artifact
bound by a signed sidecar, a checkpoint directory with its signed manifest, feeds as .npy/.npz, and
a VNNLIB property over the model.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from sealtrace.cli import main
from tests.container.conftest import tiny_model

VNNLIB = """; a property of the tiny model: x in a box, out_0 must stay below out_1
(declare-const X_0 Real)
(declare-const X_1 Real)
(declare-const Y_0 Real)
(declare-const Y_1 Real)
(declare-const Y_2 Real)
(assert (>= X_0 -1.0))
(assert (<= X_0 1.0))
(assert (>= X_1 -0.5))
(assert (<= X_1 2.5e0))
(assert (or (and (>= Y_0 Y_1) (<= (+ Y_0 (* 2 Y_2)) 3)) (> (- Y_2 Y_1) 0.25)))
"""


@dataclass(frozen=True)
class Material:
    """Paths of the seed files, all under ``root``."""

    root: Path
    model: Path
    container: Path
    private_key: Path
    public_key: Path
    log: Path
    feed: Path
    feeds: Path
    capture: Path
    capture_b: Path
    artifact: Path
    sidecar: Path
    checkpoint: Path
    manifest: Path
    vnnlib: Path
    ledger: Path
    proof: Path
    consistency: Path
    request_json: Path
    request_binary: Path
    # The same run with BLAKE3 digests: a v2 audit log and two v3 captures.
    log_blake3: Path
    capture_blake3: Path
    capture_blake3_b: Path


def _cli(*argv: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    if code != 0:
        raise RuntimeError(f"making fuzz material: sealtrace {' '.join(argv)} exited {code}: {err.getvalue()}")


def build_material(root: Path) -> Material:
    """Make every seed under ``root`` with sealtrace's own CLI."""
    root.mkdir(parents=True, exist_ok=True)
    model = root / "tiny.onnx"
    onnx.save(tiny_model(), model)
    key = root / "signer.pem"
    _cli("keygen", "-o", str(key))
    container = root / "tiny.seal"
    _cli("seal", str(model), "-o", str(container), "--sign", str(key))
    feed = root / "x.npy"
    np.save(feed, np.array([[0.25, -1.5]], np.float32))
    feeds = root / "feeds.npz"
    np.savez(feeds, x=np.array([[0.25, -1.5]], np.float32))
    log = root / "run.jsonl"
    capture, capture_b = root / "capture_a", root / "capture_b"
    _cli("run", str(container), "--input", f"x={feed}", "--audit", str(log), "--sign-log", str(key),
         "--capture", str(capture))
    _cli("run", str(container), "--input", f"x={feed}", "--capture", str(capture_b))
    log_blake3, capture_blake3, capture_blake3_b = root / "run.b3.jsonl", root / "capture_b3_a", root / "capture_b3_b"
    _cli("run", str(container), "--input", f"x={feed}", "--digest", "blake3", "--audit", str(log_blake3),
         "--sign-log", str(key), "--capture", str(capture_blake3))
    _cli("run", str(container), "--input", f"x={feed}", "--digest", "blake3", "--capture", str(capture_blake3_b))
    artifact = root / "tiny.opt.onnx"
    _cli("compile", str(container), "--level", "basic", "-o", str(artifact), "--sign", str(key))
    checkpoint = root / "checkpoint"
    checkpoint.mkdir()
    np.save(checkpoint / "step.npy", np.arange(12, dtype=np.int64).reshape(3, 4))
    np.savez_compressed(checkpoint / "optimizer.npz", m=np.linspace(0, 1, 10, dtype=np.float32),
                        v=np.ones((2, 2), np.float64))
    from safetensors.numpy import save_file

    save_file({"w": np.eye(3, dtype=np.float32), "b": np.zeros(3, np.float16)}, str(checkpoint / "model.safetensors"))
    manifest = root / "checkpoint.manifest.json"
    _cli("manifest", "create", str(checkpoint), "-o", str(manifest), "--sign", str(key))
    vnnlib = root / "prop.vnnlib"
    vnnlib.write_text(VNNLIB)
    ledger, proof, consistency = root / "ledger.db", root / "proof.json", root / "consistency.json"
    record_id = _make_ledger(ledger, key)
    _cli("ledger", "prove", str(ledger), record_id, "-o", str(proof))
    _cli("ledger", "consistency", str(ledger), "1", "-o", str(consistency))
    request_json, request_binary = root / "request.json", root / "request.bin"
    request_json.write_text(json.dumps({"id": "r1", "inputs": [
        {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [0.25, -1.5]}],
        "outputs": [{"name": "out", "parameters": {"binary_data": True}}]}))
    header = json.dumps({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32",
                                     "parameters": {"binary_data_size": 8}}]}).encode()
    # The file holds the Inference-Header-Content-Length value on its first line, then the body.
    request_binary.write_bytes(b"%d\n" % len(header) + header + np.array([0.25, -1.5], "<f4").tobytes())
    return Material(
        root=root, model=model, container=container, private_key=key, public_key=key.with_suffix(".pub"),
        log=log, feed=feed, feeds=feeds, capture=capture, capture_b=capture_b, artifact=artifact,
        sidecar=artifact.with_name(artifact.name + ".binding.json"), checkpoint=checkpoint, manifest=manifest,
        vnnlib=vnnlib, ledger=ledger, proof=proof, consistency=consistency, request_json=request_json,
        request_binary=request_binary, log_blake3=log_blake3, capture_blake3=capture_blake3,
        capture_blake3_b=capture_blake3_b,
    )


def _make_ledger(location: Path, key: Path) -> str:
    """A ledger of three signed records; the id of the second."""
    from sealtrace.ledger import Ledger, new_record

    ids = []
    with Ledger.open(str(location), signer=str(key), head_every=1) as ledger:
        for i in range(3):
            record = new_record(model_name="tiny", plan_digest=f"{i:064x}", backend="reference",
                                backend_version="0", inputs={"x": np.full((1, 2), i, np.float32)},
                                outputs={"out": np.zeros((1, 3), np.float32)}, principal="fuzz")
            ids.append(ledger.append(record).record_id)
    return ids[1]
