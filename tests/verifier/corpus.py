"""The agreement corpus of issue 18: sealtrace and the independent Go verifier (``verifier/``,
``sealverify``) on the same cases must give the same verdict (exit code) and name the same failure.

The material is made with sealtrace (keys, containers, audit logs, bindings, ledger proofs); the cases
derive from it: valid, signed, unsigned, wrong key, every single-byte flip of small containers, logs,
sidecars and proofs, truncations, reordered, duplicated, removed and edited log lines (re-digested, so
that the check past the chain runs), forged headers with consistent digests, tampered artifacts.
sealtrace runs in this process (``sealtrace.cli.main`` with ``--json``); sealverify runs every case in
one process (``sealverify batch``).

What is compared, per check (the verdict schema, ``schemas/verdict.schema.json``):

- always the exit code (0, 1 or 2);
- container: the set of (kind, where) of every mismatch;
- audit log: the line of the first bad record;
- binding: the set of (kind, where) of the failed checks;
- proof: the part named by the first failure;
- and for a verdict of 0 the digests both report (container, run, root).

``python -m tests.verifier.corpus [--sample N] [--keep DIR]`` runs it (``make verifier-corpus`` runs all).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import io
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
VERIFIER_DIR = ROOT / "verifier"

# sealtrace's verb for each check, and the verdict parts compared.
SEALTRACE_VERB = {"container": ["verify"], "audit": ["audit", "verify"], "binding": ["check-binding"],
                  "proof": ["ledger", "check-proof"]}
MAGIC = b"\x89SEAL\r\n\x1a"


@dataclass
class Case:
    """One check of one file, run by both implementations."""

    id: str
    family: str
    check: str  # container | audit | binding | proof
    subject: Path
    options: list[str]
    # Files to write before the case runs (name -> bytes, or a function making them).
    files: dict[Path, Callable[[], bytes]] = field(default_factory=dict)
    # Anything else to arrange before it runs (symbolic links).
    setup: Callable[[], None] | None = None

    def sealtrace_args(self) -> list[str]:
        return [*SEALTRACE_VERB[self.check], str(self.subject), *self.options, "--json"]

    def sealverify_args(self) -> list[str]:
        return [self.check, str(self.subject), *self.options]

    def write(self) -> None:
        for path, make in self.files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(make())
        if self.setup is not None:
            self.setup()


@dataclass(frozen=True)
class Outcome:
    """What one implementation said about a case: exit code, named failure, digests."""

    exit_code: int
    named: Any
    digests: tuple[tuple[str, str], ...]
    detail: str


# ---------------------------------------------------------------------------------------------- models


def mlp_model() -> onnx.ModelProto:
    """MatMul, Add, a Constant-node weight, Relu: three sealed tensors."""
    w = numpy_helper.from_array((np.arange(12, dtype=np.float32).reshape(3, 4) / 7), "fc.weight")
    b = numpy_helper.from_array(np.array([0.5, -1, 2, 0], dtype=np.float32), "fc.bias")
    nodes = [
        helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.full(4, 1.5, np.float32))),
        helper.make_node("MatMul", ["x", "fc.weight"], ["h"]),
        helper.make_node("Add", ["h", "fc.bias"], ["h2"]),
        helper.make_node("Mul", ["h2", "k"], ["h3"]),
        helper.make_node("Relu", ["h3"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def branch_model() -> onnx.ModelProto:
    """An If whose branches hold weights of their own (subgraph initializers, subgraph steps in logs)."""

    def branch(name: str, op: str, value: float) -> onnx.GraphProto:
        w = numpy_helper.from_array(np.full(2, value, np.float32), f"{name}.w")
        node = helper.make_node(op, ["x", f"{name}.w"], [f"{name}_out"])
        return helper.make_graph([node], name, [], [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2])],
                                 [w])

    bias = numpy_helper.from_array(np.array([0.25, -0.5], np.float32), "bias")
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0.0, np.float32))),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["t"], then_branch=branch("then", "Add", 1.0), else_branch=branch("else", "Sub", 2.0)),
        helper.make_node("Add", ["t", "bias"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# -------------------------------------------------------------------------------------------- material


def sealtrace(*args: str) -> tuple[int, str, str]:
    """Run the sealtrace CLI in this process: exit code, stdout, stderr."""
    from sealtrace.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _must(*args: str) -> str:
    code, out, err = sealtrace(*args)
    if code != 0:
        raise RuntimeError(f"sealtrace {' '.join(args)} failed ({code}): {err.strip()}")
    return out


@dataclass
class Material:
    """Valid evidence made by sealtrace, from which every case derives."""

    root: Path
    key: Path  # private key that signed everything
    pub: Path
    other_pub: Path  # a key that signed nothing
    containers: dict[str, Path]  # signed, unsigned, branch (signed twice); v1, v1-signed (format version 1)
    logs: dict[str, Path]  # signed, unsigned, branch
    artifacts: dict[str, Path]  # file (any bytes), onnx (ORT-compiled, binding embedded too), external
    proofs: dict[str, Path]
    other_ledger_proof: Path


def make_material(root: Path) -> Material:
    """Keys, containers, logs, bindings and ledger proofs, made by sealtrace in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    key, pub = root / "k.pem", root / "k.pub"
    _must("keygen", "-o", str(key))
    _must("keygen", "-o", str(root / "other.pem"))
    second = root / "second.pem"
    _must("keygen", "-o", str(second))
    onnx.save(mlp_model(), root / "mlp.onnx")
    onnx.save(branch_model(), root / "branch.onnx")
    np.save(root / "x.npy", np.array([[1, 2, 3]], np.float32))
    np.save(root / "bx.npy", np.array([1.5, -0.5], np.float32))
    containers = {"signed": root / "mlp.seal", "unsigned": root / "mlp-unsigned.seal", "branch": root / "branch.seal"}
    _must("seal", str(root / "mlp.onnx"), "-o", str(containers["signed"]), "--sign", str(key))
    _must("seal", str(root / "mlp.onnx"), "-o", str(containers["unsigned"]))
    _must("seal", str(root / "branch.onnx"), "-o", str(containers["branch"]), "--sign", str(key), "--sign", str(second))
    # Containers of format version 1 (no graph index), written by the sealtrace before version 2.
    for name in ("v1", "v1-signed"):
        containers[name] = root / f"{name}.seal"
        shutil.copyfile(ROOT / "tests" / "container" / "data" / f"{name}.seal", containers[name])
    logs = {"signed": root / "mlp.jsonl", "unsigned": root / "mlp-unsigned.jsonl", "branch": root / "branch.jsonl"}
    _must("run", str(containers["signed"]), "--input", f"x={root / 'x.npy'}", "--audit", str(logs["signed"]),
          "--sign-log", str(key), "--sample", "2")
    _must("run", str(containers["unsigned"]), "--input", f"x={root / 'x.npy'}", "--audit", str(logs["unsigned"]),
          "--sample", "0")
    _must("run", str(containers["branch"]), "--input", f"x={root / 'bx.npy'}", "--audit", str(logs["branch"]),
          "--sign-log", str(key), "--sample", "1")
    # A BLAKE3 log (format v2, issue 16), signed; and the v1 logs of tests/fixtures/v1, written before v2.
    logs["blake3"] = root / "mlp-blake3.jsonl"
    _must("run", str(containers["signed"]), "--input", f"x={root / 'x.npy'}", "--audit", str(logs["blake3"]),
          "--sign-log", str(key), "--sample", "2", "--digest", "blake3")
    for name in logs.values():  # the host facts make logs large; the cases flip every byte
        _shrink_host(name)
    fixtures = ROOT / "tests" / "fixtures" / "v1"
    for name in ("mlp-onnx.jsonl", "mlp-seal-signed.jsonl", "loop.jsonl", "ext-seal.jsonl"):
        shutil.copyfile(fixtures / name, root / f"v1-{name}")
        logs[f"v1-{name.removesuffix('.jsonl')}"] = root / f"v1-{name}"
    artifacts = {"file": root / "mlp.engine", "onnx": root / "mlp.ort.onnx"}
    artifacts["file"].write_bytes(bytes(random.Random(7).randrange(256) for _ in range(300)))
    _must("bind", str(artifacts["file"]), "--to", str(containers["signed"]), "--sign", str(key))
    _must("compile", str(containers["signed"]), "--backend", "onnxruntime", "--level", "basic", "-o",
          str(artifacts["onnx"]), "--sign", str(key))
    # An ONNX model whose weights live in an external data file, bound (scope file+external-data) and run.
    external = root / "external"
    external.mkdir()
    onnx.save(mlp_model(), external / "mlp.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    artifacts["external"] = external / "mlp.onnx"
    _must("bind", str(artifacts["external"]), "--to", str(containers["signed"]), "--sign", str(key))
    logs["external"] = root / "external.jsonl"
    _must("run", str(artifacts["external"]), "--input", f"x={root / 'x.npy'}", "--audit", str(logs["external"]),
          "--sample", "0")
    _shrink_host(logs["external"])
    proofs, other = _make_ledger_proofs(root, key, root / "other.pem")
    return Material(root, key, pub, root / "other.pub", containers, logs, artifacts, proofs, other)


def _shrink_host(log: Path) -> None:
    """Rewrite a log with a short ``host`` (re-digested, re-signed): the same structure, fewer bytes."""
    from sealtrace.signing import load_private_key, sign_digest

    records = [json.loads(line) for line in log.read_text().splitlines()]
    records[0]["host"]["cpu"]["flags"] = records[0]["host"]["cpu"]["flags"][:3]
    records[0]["host"]["blas"] = {}
    signed = "signature" in records[-1]
    lines = redigest(records)
    if signed:
        footer = json.loads(lines[-1])
        footer["signature"] = sign_digest(load_private_key(log.parent / "k.pem"), footer["chain_head"]).to_json()
        lines[-1] = canonical(footer)
    log.write_text("".join(line + "\n" for line in lines))


def _make_ledger_proofs(root: Path, key: Path, other_key: Path) -> tuple[dict[str, Path], Path]:
    from sealtrace.ledger import Ledger, new_record

    def record(i: int, principal: str | None) -> Any:
        return new_record(
            model_name="mlp", plan_digest="ab" * 32, container_digest="cd" * 32, backend="reference",
            backend_version="0.1.0", inputs={"x": np.array([i], np.float32)}, outputs={"y": np.array([2 * i], np.int64)},
            principal=principal, audit="io",
        )

    ids = []
    with Ledger.open(root / "ledger.db", signer=str(key), head_every=3, head_interval=3600) as ledger:
        for i in range(7):
            ids.append(ledger.append(record(i, "alice" if i % 2 else "b\u00f6b \u2603")).record_id)
    proofs: dict[str, Path] = {}
    for index, size in [(0, 7), (2, 7), (6, 7), (1, 3), (5, 6)]:
        path = root / f"inclusion-{index}-of-{size}.json"
        _must("ledger", "prove", str(root / "ledger.db"), ids[index], "--tree-size", str(size), "-o", str(path))
        proofs[f"inclusion-{index}-{size}"] = path
    for first, second in [(3, 7), (6, 7), (3, 6), (7, 7)]:
        path = root / f"consistency-{first}-{second}.json"
        _must("ledger", "consistency", str(root / "ledger.db"), str(first), str(second), "-o", str(path))
        proofs[f"consistency-{first}-{second}"] = path
    with Ledger.open(root / "other.db", signer=str(other_key), head_every=2, head_interval=3600) as ledger:
        other_ids = [ledger.append(record(i, None)).record_id for i in range(2)]
    other = root / "other-inclusion.json"
    _must("ledger", "prove", str(root / "other.db"), other_ids[1], "-o", str(other))
    return proofs, other


# --------------------------------------------------------------------------------- formats, from docs/


def canonical(value: Any) -> str:
    """Canonical JSON (docs/container-format.md): sorted keys, no whitespace, ASCII."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blake3_hex(data: bytes) -> str:
    from blake3 import blake3

    return blake3(data).hexdigest()


def redigest(records: list[dict[str, Any]], algorithm: str | None = None) -> list[str]:
    """Audit log lines with every digest and prev recomputed (a forger's consistent chain), with
    ``algorithm`` (default: BLAKE3 when the header names it, else sha256)."""
    if algorithm is None:
        named = records[0].get("digest_algorithm") if records and isinstance(records[0], dict) else None
        algorithm = "blake3" if named == "blake3" else "sha256"
    digest_of = blake3_hex if algorithm == "blake3" else sha256_hex
    lines, prev = [], "0" * 64
    for record in records:
        record = dict(record)
        record["prev"] = prev
        key = "chain_head" if record.get("type") == "footer" else "digest"
        record.pop(key, None)
        signature = record.pop("signature", None)
        digest = digest_of(canonical(record).encode())
        record[key] = digest
        if signature is not None:
            record["signature"] = signature
        lines.append(canonical(record))
        prev = digest
    return lines


@dataclass
class ContainerParts:
    header: dict[str, Any]
    data: bytes


def split_container(blob: bytes) -> ContainerParts:
    length = struct.unpack("<I", blob[12:16])[0]
    start = (48 + length + 63) // 64 * 64
    return ContainerParts(json.loads(blob[48:48 + length]), blob[start:])


def join_container(header: dict[str, Any], data: bytes, header_text: bytes | None = None, version: int = 2) -> bytes:
    """A container whose preamble digest matches its header (unless the header text is given raw)."""
    text = header_text if header_text is not None else canonical(header).encode()
    digest = hashlib.sha256(canonical(header["container"]).encode()).digest()
    start = (48 + len(text) + 63) // 64 * 64
    return MAGIC + struct.pack("<II", version, len(text)) + digest + text + b"\0" * (start - 48 - len(text)) + data


# ------------------------------------------------------------------------------------------ the cases


def forge_graph(blob: bytes, edit: Callable[[onnx.ModelProto], Any]) -> bytes:
    """The container with its graph section edited in place and its header untouched (no key): the
    model's doc string evens out the length, so the layout holds and the index comparison runs."""
    parts = split_container(blob)
    section = parts.header["container"]["sections"][0]
    start = len(blob) - len(parts.data) + section["offset"]
    length = section["length"]
    model = onnx.ModelProto()
    model.ParseFromString(blob[start:start + length])
    edit(model)
    raw = model.SerializeToString(deterministic=True)
    for pad in range(length):
        if len(raw) >= length:
            break
        model.doc_string = "#" * pad
        raw = model.SerializeToString(deterministic=True)
    if len(raw) != length:
        raise ValueError(f"the edited graph is {len(raw)} bytes, not {length}")
    return blob[:start] + raw + blob[start + length:]


class CaseMaker:
    """Names case files under one directory and collects the cases."""

    def __init__(self, material: Material, out: Path) -> None:
        self.m = material
        self.out = out
        self.cases: list[Case] = []

    def add(self, family: str, check: str, name: str, make: Callable[[], bytes] | None, options: list[str],
            suffix: str, subject: Path | None = None, extra: dict[Path, Callable[[], bytes]] | None = None) -> Case:
        case_id = f"{family}/{name}"
        if subject is None:
            subject = self.out / family / f"{name}{suffix}"
        files = dict(extra or {})
        if make is not None:
            files[subject] = make
        case = Case(case_id, family, check, subject, options, files)
        self.cases.append(case)
        return case


def flip(blob: bytes, position: int, mask: int) -> Callable[[], bytes]:
    def make() -> bytes:
        b = bytearray(blob)
        b[position] ^= mask
        return bytes(b)
    return make


def const(blob: bytes) -> Callable[[], bytes]:
    return lambda: blob


def container_cases(cm: CaseMaker) -> None:
    m = cm.m
    trust, other = ["--trust", str(m.pub)], ["--trust", str(m.other_pub)]
    signed = m.containers["signed"].read_bytes()
    unsigned = m.containers["unsigned"].read_bytes()
    branch = m.containers["branch"].read_bytes()
    digest = signed[16:48].hex()
    # Valid material, signed and not, with and without trust.
    for name, path in m.containers.items():
        for label, options in [("plain", []), ("trust", trust), ("other-key", other), ("both-keys", [*other, *trust]),
                               ("require", [*trust, "--require-signature"])]:
            cm.add("container-valid", "container", f"{name}-{label}", None, options, "", subject=path)
    cm.add("container-valid", "container", "expect-right", None, ["--expect-digest", digest], "", subject=m.containers["signed"])
    cm.add("container-valid", "container", "expect-upper", None, ["--expect-digest", digest.upper()], "",
           subject=m.containers["signed"])
    cm.add("container-valid", "container", "expect-wrong", None, ["--expect-digest", "0" * 64], "",
           subject=m.containers["signed"])
    cm.add("container-valid", "container", "expect-short", None, ["--expect-digest", "0" * 63], "",
           subject=m.containers["signed"])
    cm.add("container-valid", "container", "require-no-trust", None, ["--require-signature"], "", subject=m.containers["signed"])
    cm.add("container-valid", "container", "missing-key", None, ["--trust", str(m.root / "nope.pub")], "",
           subject=m.containers["signed"])
    cm.add("container-valid", "container", "key-is-private", None, ["--trust", str(m.key)], "", subject=m.containers["signed"])
    cm.add("container-valid", "container", "not-a-container", const(b"hello"), [], ".bin")
    cm.add("container-valid", "container", "magic-not-seal-name", const(signed), [], ".bin")
    cm.add("container-valid", "container", "onnx-named-seal", const((m.root / "mlp.onnx").read_bytes()), [], ".seal")
    cm.add("container-valid", "container", "empty-seal", const(b""), [], ".seal")
    cm.add("container-valid", "container", "empty-bin", const(b""), [], ".bin")
    cm.add("container-valid", "container", "dev-zero", None, [], "", subject=Path("/dev/zero"))
    cm.add("container-valid", "container", "directory", None, [], "", subject=m.root)
    cm.add("container-valid", "container", "missing", None, [], "", subject=m.root / "missing.seal")
    # Every single-byte flip: the signed container checked with its key, the unsigned one without.
    for i in range(len(signed)):
        cm.add("container-flip-signed", "container", f"{i:05d}", flip(signed, i, 0x01), trust, ".seal")
    for i in range(len(unsigned)):
        cm.add("container-flip-unsigned", "container", f"{i:05d}", flip(unsigned, i, 0x80), [], ".seal")
    for i in range(0, len(branch), 3):
        cm.add("container-flip-branch", "container", f"{i:05d}", flip(branch, i, 0x20), [], ".seal")
    old = m.containers["v1-signed"].read_bytes()
    for i in range(0, len(old), 2):
        cm.add("container-flip-v1", "container", f"{i:05d}", flip(old, i, 0x04), [], ".seal")
    # Truncations (and growth).
    for n in sorted({*range(0, len(signed), 13), 7, 8, 16, 47, 48, 49, len(signed) - 1}):
        cm.add("container-truncate", "container", f"{n:05d}", const(signed[:n]), trust, ".seal")
    cm.add("container-truncate", "container", "grown", const(signed + b"\0"), trust, ".seal")
    cm.add("container-truncate", "container", "grown-64", const(signed + b"\0" * 64), trust, ".seal")
    forged_container_cases(cm, unsigned, signed)
    graph_index_cases(cm, unsigned, branch, m.containers["v1"].read_bytes())


def graph_index_cases(cm: CaseMaker, unsigned: bytes, branch: bytes, old: bytes) -> None:
    """Format version 2's graph index: forged indexes (re-digested headers), graph sections edited
    under an untouched header (named node by node), and version 1 headers."""
    base = split_container(unsigned)

    def forge(name: str, edit: Callable[[dict[str, Any]], Any], version: int = 2, parts: ContainerParts = base) -> None:
        header = copy.deepcopy(parts.header)
        edit(header)
        cm.add("container-graph-index", "container", name, const(join_container(header, parts.data, version=version)), [],
               ".seal")

    gi = lambda h: h["container"]["graph_index"]  # noqa: E731
    node0 = lambda h: h["container"]["graph_index"]["nodes"][0]  # noqa: E731
    forge("identity", lambda h: None)
    forge("missing", lambda h: h["container"].pop("graph_index"))
    forge("extra-key", lambda h: gi(h).update(extra="x"))
    forge("node-renamed", lambda h: node0(h).update(name="x"))
    forge("node-label-null", lambda h: node0(h).update(name=None))
    forge("node-label-number", lambda h: node0(h).update(name=5))
    forge("node-label-256", lambda h: node0(h).update(name="n" * 256))
    forge("node-label-257", lambda h: node0(h).update(name="n" * 257))
    forge("node-digest-upper", lambda h: node0(h).update(sha256=node0(h)["sha256"].upper()))
    forge("node-digest-other", lambda h: node0(h).update(sha256="0" * 64))
    forge("node-extra-key", lambda h: node0(h).update(index=0))
    forge("node-dropped", lambda h: gi(h)["nodes"].pop())
    forge("nodes-object", lambda h: gi(h).update(nodes={}))
    forge("attributes-null", lambda h: node0(h).update(attributes=None))
    forge("attribute-missing-digest", lambda h: node0(h)["attributes"][0].pop("sha256"))
    forge("attribute-renamed", lambda h: node0(h)["attributes"][0].update(name="values"))
    forge("opset-domain-null", lambda h: gi(h)["opset_imports"][0].update(domain=None))
    forge("opset-dropped", lambda h: gi(h)["opset_imports"].pop())
    forge("model-digest-short", lambda h: gi(h).update(model="0" * 63))
    forge("graph-digest-other", lambda h: gi(h).update(graph="f" * 64))
    forge("in-version-1", lambda h: h["container"].update(format_version=1), version=1)
    forge("preamble-1-header-2", lambda h: None, version=1)
    old_parts = split_container(old)
    forge("v1-identity", lambda h: None, version=1, parts=old_parts)
    forge("v1-as-version-2", lambda h: h["container"].update(format_version=2), version=2, parts=old_parts)
    forge("v1-with-index", lambda h: h["container"].update(graph_index=gi(base.header)), version=1, parts=old_parts)

    # Graph sections edited in place: what changed is named by both, node by node.
    def edit(name: str, blob: bytes, change: Callable[[onnx.ModelProto], Any]) -> None:
        cm.add("container-graph-edit", "container", name, const(forge_graph(blob, change)), [], ".seal")

    nodes = lambda m: m.graph.node  # noqa: E731
    edit("op-type", unsigned, lambda m: setattr(nodes(m)[4], "op_type", "Tanh"))
    edit("rewired", unsigned, lambda m: nodes(m)[3].input.__setitem__(1, "h"))
    edit("attribute-dims", unsigned, lambda m: nodes(m)[0].attribute[0].t.dims.__setitem__(0, 5))
    edit("attribute-removed", unsigned, lambda m: nodes(m)[0].attribute.pop())
    edit("node-removed", unsigned, lambda m: nodes(m).remove(nodes(m)[3]))
    def swap(m: onnx.ModelProto) -> None:
        first, second = copy.deepcopy(nodes(m)[1]), copy.deepcopy(nodes(m)[2])
        nodes(m)[1].CopyFrom(second)
        nodes(m)[2].CopyFrom(first)

    edit("nodes-swapped", unsigned, swap)
    edit("node-named", unsigned, lambda m: (setattr(nodes(m)[4], "name", "n\u0027\n"), nodes(m).pop(3)))
    edit("opset", unsigned, lambda m: setattr(m.opset_import[0], "version", 18))
    edit("opset-domain", unsigned, lambda m: m.opset_import[0].ClearField("domain"))
    edit("graph-name", unsigned, lambda m: setattr(m.graph, "name", "MLP"))
    edit("ir-version", unsigned, lambda m: setattr(m, "ir_version", 9))
    edit("branch-subgraph", branch, lambda m: setattr(nodes(m)[3].attribute[0].g.node[0], "op_type", "Mul"))
    edit("branch-keepdims", branch, lambda m: setattr(nodes(m)[0].attribute[0], "i", 1))
    edit("branch-node-removed", branch, lambda m: nodes(m).remove(nodes(m)[4]))

    def reorder(m: onnx.ModelProto) -> None:
        first, second = copy.deepcopy(nodes(m)[3].attribute[0]), copy.deepcopy(nodes(m)[3].attribute[1])
        nodes(m)[3].attribute[0].CopyFrom(second)
        nodes(m)[3].attribute[1].CopyFrom(first)

    edit("branch-attributes-reordered", branch, reorder)


def forged_container_cases(cm: CaseMaker, unsigned: bytes, signed: bytes) -> None:
    """Headers edited and re-digested (no key needed): the checks past the digest must catch them."""
    base = split_container(unsigned)
    sig_base = split_container(signed)

    def forge(name: str, edit: Callable[[dict[str, Any]], Any], data: bytes | None = None, sig: bool = False,
              raw: Callable[[dict[str, Any]], bytes] | None = None) -> None:
        parts = sig_base if sig else base
        header = copy.deepcopy(parts.header)
        edit(header)
        blob = join_container(header, data if data is not None else parts.data, raw(header) if raw else None)
        cm.add("container-forged", "container", name, const(blob), ["--trust", str(cm.m.pub)] if sig else [], ".seal")

    c = lambda h: h["container"]  # noqa: E731
    t0 = lambda h: h["container"]["tensors"][0]  # noqa: E731
    forge("identity", lambda h: None)
    forge("identity-signed", lambda h: None, sig=True)
    forge("shape-swapped", lambda h: t0(h).update(shape=[4, 3]))
    forge("dtype-int32", lambda h: t0(h).update(dtype="int32"))
    forge("dtype-unknown", lambda h: t0(h).update(dtype="float128"))
    forge("storage-unknown", lambda h: t0(h).update(storage="text"))
    forge("renamed", lambda h: t0(h).update(name="other"))
    forge("name-backslash", lambda h: t0(h).update(name="a\\b"))
    forge("name-absolute", lambda h: t0(h).update(name="/abs"))
    forge("name-drive", lambda h: t0(h).update(name="C:x"))
    forge("name-dotdot", lambda h: t0(h).update(name="a/../b"))
    forge("name-dot", lambda h: t0(h).update(name="./b"))
    forge("name-control", lambda h: t0(h).update(name="a\u0001"))
    forge("name-del", lambda h: t0(h).update(name="a\u007f"))
    forge("name-empty", lambda h: t0(h).update(name=""))
    forge("name-long", lambda h: t0(h).update(name="n" * 5000))
    forge("name-duplicate", lambda h: c(h)["tensors"][1].update(name=t0(h)["name"]))
    forge("extra-key", lambda h: c(h).update(extra=1))
    forge("extra-top-key", lambda h: h.update(extra=1))
    forge("missing-key", lambda h: c(h).pop("source"))
    forge("chunk-float", lambda h: None, raw=lambda h: canonical(h).replace('"chunk_size":16777216', '"chunk_size":16777216.0').encode())
    forge("chunk-not-pow2", lambda h: c(h).update(chunk_size=3 * 65536))
    forge("chunk-64k", lambda h: c(h).update(chunk_size=65536))
    forge("chunk-small", lambda h: c(h).update(chunk_size=32768))
    forge("chunk-huge", lambda h: c(h).update(chunk_size=2 ** 31))
    forge("chunk-bool", lambda h: c(h).update(chunk_size=True))
    forge("format-version-3", lambda h: c(h).update(format_version=3))
    forge("format-version-1-header", lambda h: c(h).update(format_version=1))
    forge("format-name", lambda h: c(h).update(format="sealtrace.other"))
    forge("alignment-128", lambda h: c(h).update(alignment=128))
    forge("two-sections", lambda h: c(h)["sections"].append(dict(c(h)["sections"][0], name="extra")))
    forge("no-sections", lambda h: c(h).update(sections=[]))
    forge("section-renamed", lambda h: c(h)["sections"][0].update(name="weights"))
    forge("section-encoding", lambda h: c(h)["sections"][0].update(encoding="json"))
    forge("tensors-swapped", lambda h: c(h)["tensors"].reverse())
    forge("offset-gap", lambda h: c(h)["tensors"][-1].update(offset=c(h)["tensors"][-1]["offset"] + 64))
    forge("offset-misaligned", lambda h: t0(h).update(offset=t0(h)["offset"] + 8))
    forge("offset-overlap", lambda h: c(h)["tensors"][1].update(offset=t0(h)["offset"]))
    forge("length-wrong", lambda h: t0(h).update(length=t0(h)["length"] - 4))
    forge("length-negative", lambda h: t0(h).update(length=-48))
    forge("digest-two-chunks", lambda h: t0(h).update(sha256=t0(h)["sha256"] * 2))
    forge("digest-none", lambda h: t0(h).update(sha256=[]))
    forge("digest-upper", lambda h: t0(h).update(sha256=[t0(h)["sha256"][0].upper()]))
    forge("digest-short", lambda h: t0(h).update(sha256=[t0(h)["sha256"][0][:-1]]))
    forge("digest-other", lambda h: t0(h).update(sha256=["0" * 64]))
    forge("shape-huge", lambda h: t0(h).update(shape=[2 ** 62, 2 ** 62]))
    forge("shape-negative", lambda h: t0(h).update(shape=[-3, -4]))
    forge("shape-65-dims", lambda h: t0(h).update(shape=[1] * 65))
    forge("ir-2^63-1", lambda h: c(h)["model"].update(ir_version=2 ** 63 - 1))
    forge("ir-2^63", lambda h: c(h)["model"].update(ir_version=2 ** 63))
    forge("ir-2^64", lambda h: c(h)["model"].update(ir_version=2 ** 64))
    forge("ir-negative", lambda h: c(h)["model"].update(ir_version=-1))
    forge("ir-string", lambda h: c(h)["model"].update(ir_version="8"))
    forge("model-version-bool", lambda h: c(h)["model"].update(model_version=True))
    forge("producer-nonascii", lambda h: c(h)["model"].update(producer_name="caf\u00e9 \U0001f600"))
    forge("producer-raw-utf8", lambda h: c(h)["model"].update(producer_name="caf\u00e9"),
          raw=lambda h: json.dumps(h, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())
    forge("producer-lone-surrogate", lambda h: c(h)["model"].update(producer_name="a\ud800b"))
    forge("producer-long", lambda h: c(h)["model"].update(producer_name="p" * 5000))
    forge("whitespace", lambda h: None, raw=lambda h: json.dumps(h, sort_keys=True).encode())
    forge("unsorted", lambda h: None, raw=lambda h: json.dumps(h, separators=(",", ":")).encode())
    forge("duplicate-key", lambda h: None,
          raw=lambda h: canonical(h).replace('"alignment":64,', '"alignment":64,"alignment":64,').encode())
    forge("escaped-slash", lambda h: c(h)["model"].update(producer_name="a/b"),
          raw=lambda h: canonical(h).replace("a/b", "a\\/b").encode())
    forge("upper-escape", lambda h: c(h)["model"].update(producer_name="\u00e9"),
          raw=lambda h: canonical(h).replace("\\u00e9", "\\u00E9").encode())
    forge("version-long", lambda h: c(h).update(sealtrace_version="v" * 65))
    forge("plan-digest-other", lambda h: c(h).update(plan_digest="1" * 64))
    forge("plan-digest-bad", lambda h: c(h).update(plan_digest="xyz"))
    forge("file-name-null", lambda h: c(h)["source"].update(file_name=None))
    forge("file-name-dotdot", lambda h: c(h)["source"].update(file_name="../m.onnx"))
    forge("external-dotdot", lambda h: c(h)["source"].update(external_data=[{"path": "../d", "sha256": "0" * 64, "size": 1}]))
    forge("external-ok", lambda h: c(h)["source"].update(external_data=[{"path": "d/x.bin", "sha256": "0" * 64, "size": 1}]))
    forge("opset-extra", lambda h: c(h)["model"]["opset_imports"].append({"domain": "ai.x", "version": 1}))
    forge("signature-extra-key", lambda h: h["signatures"][0].update(x=1), sig=True)
    forge("signature-rsa", lambda h: h["signatures"][0].update(algorithm="rsa"), sig=True)
    forge("signature-keyid-upper", lambda h: h["signatures"][0].update(key_id=h["signatures"][0]["key_id"].upper()),
          sig=True)
    forge("signature-keyid-other", lambda h: h["signatures"][0].update(key_id="0" * 16), sig=True)
    forge("signature-short", lambda h: h["signatures"][0].update(signature="00" * 63), sig=True)
    forge("signature-zero", lambda h: h["signatures"][0].update(signature="00" * 64), sig=True)
    forge("signature-duplicated", lambda h: h["signatures"].append(dict(h["signatures"][0])), sig=True)
    forge("signatures-none", lambda h: h.update(signatures=[]), sig=True)
    forge("signatures-object", lambda h: h.update(signatures={}), sig=True)
    forge("graph-garbage", lambda h: c(h)["sections"][0].update(sha256=[sha256_hex(b"\xff" * c(h)["sections"][0]["length"])]),
          data=b"\xff" * base.header["container"]["sections"][0]["length"] + base.data[base.header["container"]["sections"][0]["length"]:])
    # An extra table entry no graph tensor refers to (bytes appended at the next aligned offset).
    def extra_tensor(h: dict[str, Any]) -> None:
        last = c(h)["tensors"][-1]
        offset = (last["offset"] + last["length"] + 63) // 64 * 64
        c(h)["tensors"].append({"name": "orphan", "dtype": "uint8", "shape": [4], "storage": "raw_data",
                                "offset": offset, "length": 4, "sha256": [sha256_hex(b"\1\2\3\4")]})
    last = base.header["container"]["tensors"][-1]
    end = last["offset"] + last["length"]
    pad = (end + 63) // 64 * 64 - end
    forge("orphan-tensor", extra_tensor, data=base.data + b"\0" * pad + b"\1\2\3\4")
    forge("empty-tensor-dims", lambda h: t0(h).update(shape=[0, 4], length=0, sha256=[sha256_hex(b"")]))


def audit_cases(cm: CaseMaker) -> None:
    m = cm.m
    trust, other = ["--trust", str(m.pub)], ["--trust", str(m.other_pub)]
    link = ["--container", str(m.containers["signed"])]
    for name, path in m.logs.items():
        for label, options in [("plain", []), ("trust", trust), ("other-key", other)]:
            cm.add("audit-valid", "audit", f"{name}-{label}", None, options, "", subject=path)
    cm.add("audit-valid", "audit", "signed-link", None, link, "", subject=m.logs["signed"])
    cm.add("audit-valid", "audit", "signed-link-unsigned-container", None, ["--container", str(m.containers["unsigned"])], "",
           subject=m.logs["signed"])
    cm.add("audit-valid", "audit", "unsigned-link", None, ["--container", str(m.containers["unsigned"])], "",
           subject=m.logs["unsigned"])
    cm.add("audit-valid", "audit", "branch-link-wrong", None, link, "", subject=m.logs["branch"])
    cm.add("audit-valid", "audit", "link-onnx", None, ["--container", str(m.root / "mlp.onnx")], "", subject=m.logs["signed"])
    cm.add("audit-valid", "audit", "link-engine", None, ["--container", str(m.artifacts["file"])], "",
           subject=m.logs["signed"])
    cm.add("audit-valid", "audit", "empty", const(b""), [], ".jsonl")
    cm.add("audit-valid", "audit", "newline", const(b"\n"), [], ".jsonl")
    cm.add("audit-valid", "audit", "binary", const(bytes(range(256))), [], ".jsonl")
    cm.add("audit-valid", "audit", "dev-zero", None, [], "", subject=Path("/dev/zero"))
    cm.add("audit-valid", "audit", "missing", None, [], "", subject=m.root / "missing.jsonl")
    signed = m.logs["signed"].read_bytes()
    unsigned = m.logs["unsigned"].read_bytes()
    branch = m.logs["branch"].read_bytes()
    for i in range(len(signed)):
        cm.add("audit-flip-signed", "audit", f"{i:05d}", flip(signed, i, 0x01), trust, ".jsonl")
    for i in range(0, len(unsigned), 2):
        cm.add("audit-flip-unsigned", "audit", f"{i:05d}", flip(unsigned, i, 0x04), [], ".jsonl")
    for i in range(0, len(branch), 5):
        cm.add("audit-flip-branch", "audit", f"{i:05d}", flip(branch, i, 0x40), [], ".jsonl")
    for n in sorted({*range(0, len(signed), 29), *[i + 1 for i, c in enumerate(signed) if c == 10]}):
        cm.add("audit-truncate", "audit", f"{n:05d}", const(signed[:n]), [], ".jsonl")
    lines = signed.decode().splitlines(keepends=True)
    edit_log_cases(cm, lines, trust)
    blake3_log_cases(cm)


def blake3_log_cases(cm: CaseMaker) -> None:
    """BLAKE3 logs (v2): every byte flipped, truncations, edits re-digested with either algorithm; the
    v1 logs written before v2 existed, valid, linked and flipped."""
    m = cm.m
    trust = ["--trust", str(m.pub)]
    log = m.logs["blake3"].read_bytes()
    cm.add("audit-blake3", "audit", "link", None, ["--container", str(m.containers["signed"]), *trust], "",
           subject=m.logs["blake3"])
    for i in range(len(log)):
        cm.add("audit-blake3-flip", "audit", f"{i:05d}", flip(log, i, 0x02), trust, ".jsonl")
    for n in sorted({*range(0, len(log), 37), *[i + 1 for i, c in enumerate(log) if c == 10]}):
        cm.add("audit-blake3-truncate", "audit", f"{n:05d}", const(log[:n]), [], ".jsonl")
    records = [json.loads(line) for line in log.decode().splitlines()]
    head, footer = 0, len(records) - 1

    def forged(name: str, edit: Callable[[list[dict[str, Any]]], Any], algorithm: str | None = None,
               options: list[str] | None = None) -> None:
        recs = copy.deepcopy(records)
        edit(recs)
        text = "".join(line + "\n" for line in redigest(recs, algorithm))
        cm.add("audit-blake3-forged", "audit", f"{name}-{algorithm or 'own'}", const(text.encode()), options or [],
               ".jsonl")

    for algorithm in (None, "sha256", "blake3"):
        forged("identity", lambda r: None, algorithm, trust)
        forged("algorithm-sha256", lambda r: r[head].update(digest_algorithm="sha256"), algorithm)
        forged("algorithm-unknown", lambda r: r[head].update(digest_algorithm="md5"), algorithm)
        forged("algorithm-upper", lambda r: r[head].update(digest_algorithm="BLAKE3"), algorithm)
        forged("algorithm-number", lambda r: r[head].update(digest_algorithm=3), algorithm)
        forged("algorithm-null", lambda r: r[head].update(digest_algorithm=None), algorithm)
        forged("algorithm-missing", lambda r: r[head].pop("digest_algorithm"), algorithm)
        forged("format-v1", lambda r: r[head].update(format="sealtrace.audit.v1"), algorithm)
        forged("format-v1-no-algorithm", lambda r: (r[head].update(format="sealtrace.audit.v1"),
                                                    r[head].pop("digest_algorithm")), algorithm)
        forged("format-v3", lambda r: r[head].update(format="sealtrace.audit.v3"), algorithm)
        forged("algorithm-in-step", lambda r: r[1].update(digest_algorithm="blake3"), algorithm)
        forged("steps-wrong", lambda r: r[footer].update(steps=r[footer]["steps"] + 1), algorithm)
        forged("step-input-digest", lambda r: r[2]["inputs"][0].update(digest="3" * 64), algorithm)
        forged("not-header-first", lambda r: r[head].update(type="step"), algorithm)
    for name, path in m.logs.items():
        if not name.startswith("v1-"):
            continue
        fixtures = ROOT / "tests" / "fixtures" / "v1"
        model = {"v1-mlp-onnx": "mlp.onnx", "v1-mlp-seal-signed": "mlp.seal", "v1-loop": "loop.onnx",
                 "v1-ext-seal": "ext.seal"}[name]
        cm.add("audit-v1", "audit", f"{name}-link", None, ["--container", str(fixtures / model)], "", subject=path)
        cm.add("audit-v1", "audit", f"{name}-trust", None, ["--trust", str(fixtures / "key.pub")], "", subject=path)
        blob = path.read_bytes()
        for i in range(0, len(blob), 11):
            cm.add("audit-v1-flip", "audit", f"{name}-{i:05d}", flip(blob, i, 0x08), [], ".jsonl")


def edit_log_cases(cm: CaseMaker, lines: list[str], trust: list[str]) -> None:
    """Reordered, duplicated, removed, inserted and edited lines; re-digested edits past the chain."""
    n = len(lines)
    for i in range(n):
        for j in range(i + 1, n):
            swapped = list(lines)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            cm.add("audit-lines", "audit", f"swap-{i}-{j}", const("".join(swapped).encode()), [], ".jsonl")
        cm.add("audit-lines", "audit", f"remove-{i}", const("".join(lines[:i] + lines[i + 1:]).encode()), [], ".jsonl")
        cm.add("audit-lines", "audit", f"duplicate-{i}", const("".join(lines[:i + 1] + lines[i:]).encode()), [], ".jsonl")
        cm.add("audit-lines", "audit", f"append-{i}", const("".join([*lines, lines[i]]).encode()), [], ".jsonl")
        cm.add("audit-lines", "audit", f"crlf-{i}", const("".join([*lines[:i], lines[i].replace("\n", "\r\n"), *lines[i + 1:]]).encode()),
               [], ".jsonl")
        cm.add("audit-lines", "audit", f"blank-before-{i}", const("".join([*lines[:i], "\n", *lines[i:]]).encode()), [], ".jsonl")
        pretty = json.dumps(json.loads(lines[i]), indent=1).replace("\n", " ") + "\n"
        cm.add("audit-lines", "audit", f"pretty-{i}", const("".join([*lines[:i], pretty, *lines[i + 1:]]).encode()), [], ".jsonl")
    records = [json.loads(line) for line in lines]

    def forged(name: str, edit: Callable[[list[dict[str, Any]]], Any], options: list[str] | None = None,
               keep_signature: bool = True, renumber: bool = False) -> None:
        recs = copy.deepcopy(records)
        edit(recs)
        if not keep_signature:
            recs[-1].pop("signature", None)
        if renumber:
            for i, record in enumerate(recs):
                record["seq"] = i
        text = "".join(line + "\n" for line in redigest(recs))
        cm.add("audit-forged", "audit", name, const(text.encode()), options or [], ".jsonl")

    head, first_step, footer = 0, 1, len(records) - 1
    forged("identity", lambda r: None)
    forged("identity-trust", lambda r: None, trust)  # the run digest is the same: the signature still holds
    forged("unsigned-trust", lambda r: None, trust, keep_signature=False)
    forged("format-v2", lambda r: r[head].update(format="sealtrace.audit.v2"))
    forged("format-number", lambda r: r[head].update(format=2))
    forged("format-missing", lambda r: r[head].pop("format"))
    forged("steps-wrong", lambda r: r[footer].update(steps=r[footer]["steps"] + 1))
    forged("steps-float", lambda r: r[footer].update(steps=float(r[footer]["steps"])))
    forged("steps-bool", lambda r: r[footer].update(steps=True))
    forged("output-digest", lambda r: r[footer]["outputs"][0].update(digest="1" * 64))
    forged("output-renamed", lambda r: r[footer]["outputs"][0].update(name="zz"))
    forged("output-shape", lambda r: r[footer]["outputs"][0].update(shape=[9]))
    forged("output-none-digest", lambda r: r[footer]["outputs"][0].update(digest=None))
    forged("input-digest", lambda r: r[head]["inputs"][0].update(digest="2" * 64))
    forged("step-input-digest", lambda r: r[2]["inputs"][0].update(digest="3" * 64))
    forged("step-weight-digest", lambda r: r[2]["inputs"][1].update(digest="3" * 64))
    forged("step-input-renamed", lambda r: r[2]["inputs"][0].update(name="nowhere", digest="3" * 64))
    forged("step-input-null", lambda r: r[2]["inputs"][0].update(digest=None))
    forged("step-output-digest", lambda r: r[first_step]["outputs"][0].update(digest="4" * 64))
    forged("step-in-subgraph", lambda r: r[2].update(path=["if", "then_branch", "0"]))
    forged("step-path-not-strings", lambda r: r[2].update(path=[1]))
    forged("seq-float", lambda r: r[first_step].update(seq=1.0))
    forged("seq-string", lambda r: r[first_step].update(seq="1"))
    forged("header-twice", lambda r: r.insert(1, copy.deepcopy(r[head])))
    forged("header-not-first", lambda r: r.insert(0, copy.deepcopy(r[first_step])))
    forged("footer-twice", lambda r: r.append(copy.deepcopy(r[footer])))
    forged("footer-early", lambda r: r.insert(1, copy.deepcopy(r[footer])))
    forged("no-footer", lambda r: r.pop())
    forged("no-steps", lambda r: [r.pop(1) for _ in range(len(r) - 2)])
    forged("extra-field", lambda r: r[first_step].update(extra=1))
    forged("type-unknown", lambda r: r[first_step].update(type="note"))
    forged("run-id-short", lambda r: r[head].update(run_id="abc"))
    forged("started-bad", lambda r: r[head].update(started="yesterday"))
    forged("sample-nan-string", lambda r: r[first_step]["outputs"][0].update(sample=["nan", "inf", "-inf"]))
    forged("sample-float-exponent", lambda r: r[first_step]["outputs"][0].update(sample=[1e-07, 1e16, 1.5e300, -0.0, 5e-324]))
    forged("sample-big-int", lambda r: r[first_step]["outputs"][0].update(sample=[10 ** 30]))
    forged("stats-null", lambda r: r[first_step]["outputs"][0].update(stats=None))
    forged("nested-deep", lambda r: r[first_step]["outputs"][0].update(sample=[_nest(40)]))
    forged("nested-31", lambda r: r[head]["host"].update(x=_nest(28)))
    forged("nested-32", lambda r: r[head]["host"].update(x=_nest(29)))
    forged("nested-33", lambda r: r[head]["host"].update(x=_nest(30)))
    forged("host-extra", lambda r: r[head]["host"].update(extra={"a": 1.5}))
    forged("model-kind", lambda r: r[head]["model"].update(kind="onnx"), ["--container", str(cm.m.containers["signed"])])
    forged("model-digest", lambda r: r[head]["model"].update(container_digest="5" * 64),
           ["--container", str(cm.m.containers["signed"])])
    forged("model-digest-trust", lambda r: r[head]["model"].update(container_digest="5" * 64), trust)
    forged("signature-keyid", lambda r: r[footer]["signature"].update(key_id="0" * 16), trust)
    forged("signature-keyid-plain", lambda r: r[footer]["signature"].update(key_id="0" * 16))
    forged("signature-bad", lambda r: r[footer]["signature"].update(signature="0" * 128), trust)
    forged("signature-alg", lambda r: r[footer]["signature"].update(algorithm="rsa"), trust)
    forged("signature-extra", lambda r: r[footer]["signature"].update(x=1), trust)
    seal, onnx_file = ["--container", str(cm.m.containers["signed"])], ["--container", str(cm.m.root / "mlp.onnx")]
    onnx_sha = sha256_hex((cm.m.root / "mlp.onnx").read_bytes())
    forged("step-at-line-1", lambda r: r.pop(0), renumber=True)
    forged("footer-at-line-1", lambda r: r.__delitem__(slice(0, -1)), renumber=True)
    forged("header-twice-renumbered", lambda r: r.insert(1, copy.deepcopy(r[head])), renumber=True)
    forged("footer-twice-renumbered", lambda r: r.append(copy.deepcopy(r[footer])), renumber=True)
    forged("footer-early-renumbered", lambda r: r.insert(1, copy.deepcopy(r[footer])), renumber=True)
    forged("header-only-renumbered", lambda r: r.__delitem__(slice(1, None)), renumber=True)
    forged("header-footer-renumbered", lambda r: r.__delitem__(slice(1, -1)), renumber=True)
    def model_edit(**fields: Any) -> Callable[[list[dict[str, Any]]], None]:
        return lambda r: r[head]["model"].update(fields)

    for kind in ("container", "artifact", "onnx", "proto", "plan", "unknown"):
        forged(f"kind-{kind}-seal", model_edit(kind=kind), seal)
        forged(f"kind-{kind}-onnx", model_edit(kind=kind, sha256=onnx_sha), onnx_file)
        forged(f"kind-{kind}-null-digests", model_edit(kind=kind, sha256=None, container_digest=None), seal)
    forged("input-and-steps", lambda r: (r[2]["inputs"][0].update(digest="3" * 64), r[footer].update(steps=99)))
    forged("steps-and-output", lambda r: (r[footer]["outputs"][0].update(digest="3" * 64), r[footer].update(steps=99)))
    forged("input-and-link", lambda r: (r[2]["inputs"][0].update(digest="3" * 64),
                                        r[head]["model"].update(container_digest="5" * 64)), seal)
    forged("link-and-trust", lambda r: r[head]["model"].update(container_digest="5" * 64), [*seal, *trust],
           keep_signature=False)
    forged("steps-and-trust", lambda r: r[footer].update(steps=99), trust, keep_signature=False)
    forged("output-twice", lambda r: r[footer]["outputs"].append(dict(r[footer]["outputs"][0], digest="3" * 64)))
    forged("input-named-twice", lambda r: r[head]["inputs"].append(dict(r[head]["inputs"][0], digest="3" * 64)))
    forged("unicode-name", lambda r: r[first_step].update(name="\u00e9\U0001f600\ud800"))
    forged("del-in-name", lambda r: r[first_step].update(name="a\u007fb"))


def _nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def binding_cases(cm: CaseMaker) -> None:
    m = cm.m
    trust, other = ["--trust", str(m.pub)], ["--trust", str(m.other_pub)]
    container = ["--container", str(m.containers["signed"])]
    for kind, path in m.artifacts.items():
        for label, options in [("plain", container), ("trust", [*container, *trust]), ("other-key", [*container, *other]),
                               ("other-container", ["--container", str(m.containers["branch"])])]:
            cm.add("binding-valid", "binding", f"{kind}-{label}", None, options, "", subject=path)
    cm.add("binding-valid", "binding", "no-record", None, container, "", subject=m.root / "mlp.onnx")
    cm.add("binding-valid", "binding", "container-not-one", None, ["--container", str(m.root / "mlp.onnx")], "",
           subject=m.artifacts["file"])
    damaged = cm.out / "binding-valid" / "damaged.seal"
    cm.add("binding-valid", "binding", "container-damaged", None, ["--container", str(damaged)], "",
           subject=m.artifacts["file"], extra={damaged: flip(m.containers["signed"].read_bytes(), 1900, 1)})
    art = m.artifacts["file"].read_bytes()
    sidecar = (m.artifacts["file"].parent / (m.artifacts["file"].name + ".binding.json")).read_bytes()
    onnx_art = m.artifacts["onnx"].read_bytes()
    onnx_sidecar = (m.artifacts["onnx"].parent / (m.artifacts["onnx"].name + ".binding.json")).read_bytes()
    family = cm.out / "binding-flip"

    def pair(name: str, artifact: bytes, record: bytes | None, options: list[str], suffix: str = ".engine",
             fam: str = "binding-flip") -> None:
        subject = cm.out / fam / f"{name}{suffix}"
        extra = {subject.parent / (subject.name + ".binding.json"): const(record)} if record is not None else {}
        cm.add(fam, "binding", name, const(artifact), options, suffix, subject=subject, extra=extra)

    del family
    for i in range(len(sidecar)):
        pair(f"sidecar-{i:05d}", art, flip(sidecar, i, 0x01)(), [*container, *trust])
    for i in range(0, len(art), 3):
        pair(f"artifact-{i:05d}", flip(art, i, 0x10)(), sidecar, container)
    for i in range(0, len(onnx_art), 2):
        pair(f"onnx-{i:05d}", flip(onnx_art, i, 0x01)(), onnx_sidecar, [*container, *trust], ".onnx")
    for i in range(0, len(onnx_art), 3):  # no sidecar: the record embedded in the model is read
        pair(f"onnx-embedded-{i:05d}", flip(onnx_art, i, 0x02)(), None, [*container, *trust], ".onnx")
    for n in range(0, len(sidecar), 37):
        pair(f"sidecar-truncated-{n:05d}", art, sidecar[:n], container)
    external_cases(cm, [*container, *trust])
    record = json.loads(sidecar)

    def edited(name: str, edit: Callable[[dict[str, Any]], Any], options: list[str] | None = None,
               text: Callable[[dict[str, Any]], bytes] | None = None) -> None:
        r = copy.deepcopy(record)
        edit(r)
        body = text(r) if text else json.dumps(r, indent=2).encode()
        pair(name, art, body, options if options is not None else [*container, *trust], fam="binding-edit")

    edited("identity", lambda r: None)
    edited("identity-canonical", lambda r: None, text=lambda r: canonical(r).encode())
    edited("extra-field", lambda r: r.update(extra="x"))
    edited("missing-created", lambda r: r.pop("created"))
    edited("missing-options", lambda r: r.pop("options"))
    edited("missing-signatures", lambda r: r.pop("signatures"))
    edited("missing-signatures-plain", lambda r: r.pop("signatures"), container)
    edited("signatures-empty", lambda r: r.update(signatures=[]))
    edited("created-number", lambda r: r.update(created=5))
    edited("created-null", lambda r: r.update(created=None))
    edited("options-list", lambda r: r.update(options=[]))
    edited("options-float", lambda r: r["options"].update(a=1.5))
    edited("options-float-plain", lambda r: r["options"].update(a=1.5), container)
    edited("options-nested", lambda r: r["options"].update(a={"b": [1, None, True]}))
    edited("backend-version", lambda r: r["backend"].update(version="9.9"))
    edited("backend-version-plain", lambda r: r["backend"].update(version="9.9"), container)
    edited("backend-extra", lambda r: r["backend"].update(x="y"))
    edited("backend-number", lambda r: r["backend"].update(version=1))
    edited("artifact-name", lambda r: r["artifact"].update(name="other"))
    edited("artifact-sha", lambda r: r["artifact"].update(sha256="1" * 64))
    edited("artifact-sha-upper", lambda r: r["artifact"].update(sha256=r["artifact"]["sha256"].upper()))
    edited("artifact-scope-onnx", lambda r: r["artifact"].update(digest_scope="onnx-without-binding"))
    edited("artifact-scope-external", lambda r: r["artifact"].update(digest_scope="file+external-data"))
    edited("artifact-scope-unknown", lambda r: r["artifact"].update(digest_scope="bytes"))
    edited("container-digest", lambda r: r.update(container_digest="2" * 64))
    edited("container-digest-short", lambda r: r.update(container_digest="2" * 63))
    edited("format-v2", lambda r: r.update(format="sealtrace.binding.v2"))
    edited("not-object", lambda r: None, text=lambda r: b"[]")
    edited("not-json", lambda r: None, text=lambda r: b"hello")
    edited("empty", lambda r: None, text=lambda r: b"")
    edited("nan", lambda r: None, text=lambda r: json.dumps(r).replace('"options": {}', '"options": {"a": NaN}').encode())
    edited("duplicate-key", lambda r: None,
           text=lambda r: json.dumps(r).replace('"format": ', '"format": "x", "format": ').encode())
    edited("nested-deep", lambda r: r["options"].update(a=_nest(200)))
    edited("nested-30", lambda r: r["options"].update(a=_nest(30)))
    edited("signature-keyid", lambda r: r["signatures"][0].update(key_id="0" * 16))
    edited("signature-keyid-plain", lambda r: r["signatures"][0].update(key_id="0" * 16), container)
    edited("signature-bad", lambda r: r["signatures"][0].update(signature="0" * 128))
    edited("signature-alg", lambda r: r["signatures"][0].update(algorithm="rsa"))
    edited("signature-extra", lambda r: r["signatures"][0].update(x="1"))
    edited("signature-missing-field", lambda r: r["signatures"][0].pop("key_id"))
    edited("signature-number", lambda r: r["signatures"][0].update(signature=5))
    edited("signature-not-hex", lambda r: r["signatures"][0].update(signature="zz" * 64))
    edited("signature-twice", lambda r: r["signatures"].append(dict(r["signatures"][0], key_id="0" * 16)))
    edited("unicode", lambda r: r.update(transformation="caf\u00e9 \U0001f600"))
    edited("bom", lambda r: None, text=lambda r: b"\xef\xbb\xbf" + json.dumps(r).encode())
    edited("utf16", lambda r: None, text=lambda r: json.dumps(r).encode("utf-16"))
    edited("huge", lambda r: r["options"].update(a="x" * (1 << 20)))
    edited("raw-utf8", lambda r: r.update(transformation="caf\u00e9"), text=lambda r: json.dumps(r, ensure_ascii=False).encode())


def external_cases(cm: CaseMaker, options: list[str]) -> None:
    """An ONNX artifact with external data: each case a copy of its directory, the data file changed,
    missing, cut short, grown, or a symbolic link (inside the directory, or out of it)."""
    source = cm.m.artifacts["external"]
    model, weights = source.read_bytes(), (source.parent / "weights.bin").read_bytes()
    sidecar = Path(f"{source}.binding.json").read_bytes()
    outside = cm.out / "binding-external" / "outside-weights.bin"

    def case(name: str, data: bytes | None, link: str | None = None, opts: list[str] = options) -> None:
        folder = cm.out / "binding-external" / name
        files = {folder / "mlp.onnx.binding.json": const(sidecar)}
        if data is not None:
            files[folder / "weights.bin"] = const(data)

        def setup() -> None:
            if link is not None:
                target = folder / "weights.bin"
                target.unlink(missing_ok=True)
                if link == "outside":
                    outside.write_bytes(weights)
                    target.symlink_to(outside)
                else:
                    (folder / "real.bin").write_bytes(weights)
                    target.symlink_to("real.bin")

        cm.add("binding-external", "binding", name, const(model), opts, "", subject=folder / "mlp.onnx", extra=files)
        cm.cases[-1].setup = setup

    case("valid", weights)
    case("valid-plain", weights, opts=options[:2])
    case("missing", None)
    case("truncated", weights[:-1])
    case("grown", weights + b"\0")
    case("empty", b"")
    case("link-inside", None, link="inside")
    case("link-outside", None, link="outside")
    for i in range(len(weights)):
        case(f"flip-{i:03d}", flip(weights, i, 0x01)())
    log = cm.m.logs["external"]
    folder = cm.out / "audit-external"
    for name, data in [("valid", weights), ("flipped", flip(weights, 5, 0x01)()), ("missing", None),
                       ("truncated", weights[:-1]), ("grown", weights + b"\0")]:
        files = {folder / name / "mlp.onnx": const(model)}
        if data is not None:
            files[folder / name / "weights.bin"] = const(data)
        cm.add("audit-external", "audit", name, None, ["--container", str(folder / name / "mlp.onnx")], "",
               subject=log, extra=files)


def proof_cases(cm: CaseMaker) -> None:
    m = cm.m
    trust, other = ["--trust", str(m.pub)], ["--trust", str(m.other_pub)]
    for name, path in m.proofs.items():
        cm.add("proof-valid", "proof", f"{name}-trust", None, trust, "", subject=path)
        cm.add("proof-valid", "proof", f"{name}-other-key", None, other, "", subject=path)
        cm.add("proof-valid", "proof", f"{name}-both-keys", None, [*other, *trust], "", subject=path)
    cm.add("proof-valid", "proof", "other-ledger", None, other, "", subject=m.other_ledger_proof)
    cm.add("proof-valid", "proof", "other-ledger-wrong-key", None, trust, "", subject=m.other_ledger_proof)
    cm.add("proof-valid", "proof", "no-trust", None, [], "", subject=m.proofs["inclusion-2-7"])
    cm.add("proof-valid", "proof", "dev-zero", None, trust, "", subject=Path("/dev/zero"))
    cm.add("proof-valid", "proof", "empty", const(b""), trust, ".json")
    for name in ("inclusion-2-7", "consistency-3-7", "inclusion-1-3"):
        blob = m.proofs[name].read_bytes()
        step = 1 if name == "inclusion-2-7" else 2
        for i in range(0, len(blob), step):
            cm.add(f"proof-flip-{name}", "proof", f"{i:05d}", flip(blob, i, 0x01), trust, ".json")
        for n in range(0, len(blob), 41):
            cm.add("proof-truncate", "proof", f"{name}-{n:05d}", const(blob[:n]), trust, ".json")
    edit_proof_cases(cm, trust)


def edit_proof_cases(cm: CaseMaker, trust: list[str]) -> None:
    """Proof documents edited, some with tree heads re-signed by the ledger's own key (so that the checks
    past the signature run)."""
    from sealtrace.signing import load_private_key, sign_digest

    key = load_private_key(cm.m.key)

    def resign(head: dict[str, Any]) -> dict[str, Any]:
        previous = "null" if head["previous"] is None else f'"{head["previous"]}"'
        body = (f'{{"format":"{head["format"]}","ledger":"{head["ledger"]}","previous":{previous},'
                f'"root_hash":"{head["root_hash"]}","timestamp":{head["timestamp"]},"tree_size":{head["tree_size"]}}}')
        head["signature"] = sign_digest(key, sha256_hex(body.encode())).to_json()
        return head

    inclusion = json.loads(cm.m.proofs["inclusion-2-7"].read_text())
    consistency = json.loads(cm.m.proofs["consistency-3-7"].read_text())
    same = json.loads(cm.m.proofs["consistency-7-7"].read_text())
    other = json.loads(cm.m.other_ledger_proof.read_text())

    def edited(name: str, base: dict[str, Any], edit: Callable[[dict[str, Any]], Any],
               text: Callable[[dict[str, Any]], bytes] | None = None) -> None:
        doc = copy.deepcopy(base)
        edit(doc)
        body = text(doc) if text else json.dumps(doc, indent=2).encode()
        cm.add("proof-edit", "proof", name, const(body), trust, ".json")

    def leaf_edit(change: Callable[[dict[str, Any]], Any], raw: bool = False) -> Callable[[dict[str, Any]], None]:
        def edit(d: dict[str, Any]) -> None:
            record = json.loads(d["leaf"])
            change(record)
            d["leaf"] = json.dumps(record) if raw else canonical(record)
        return edit

    edited("identity", inclusion, lambda d: None)
    edited("identity-compact", inclusion, lambda d: None, text=lambda d: canonical(d).encode())
    edited("index-other", inclusion, lambda d: d.update(index=3))
    edited("index-size", inclusion, lambda d: d.update(index=7))
    edited("index-huge", inclusion, lambda d: d.update(index=2 ** 63))
    edited("index-max", inclusion, lambda d: d.update(index=2 ** 63 - 1))
    edited("index-negative", inclusion, lambda d: d.update(index=-1))
    edited("index-float", inclusion, lambda d: d.update(index=2.0))
    edited("index-bool", inclusion, lambda d: d.update(index=True))
    edited("index-string", inclusion, lambda d: d.update(index="2"))
    edited("proof-dropped", inclusion, lambda d: d["proof"].pop())
    edited("proof-extra", inclusion, lambda d: d["proof"].append("0" * 64))
    edited("proof-reversed", inclusion, lambda d: d["proof"].reverse())
    edited("proof-upper", inclusion, lambda d: d["proof"].__setitem__(0, d["proof"][0].upper()))
    edited("proof-64", inclusion, lambda d: d.update(proof=["0" * 64] * 64))
    edited("proof-65", inclusion, lambda d: d.update(proof=["0" * 64] * 65))
    edited("proof-66", inclusion, lambda d: d.update(proof=["0" * 64] * 66))
    edited("proof-huge", inclusion, lambda d: d.update(proof=["0" * 64] * 100000))
    edited("leaf-edited", inclusion, leaf_edit(lambda r: r.update(principal="mallory")))
    edited("leaf-not-canonical", inclusion, leaf_edit(lambda r: None, raw=True))
    edited("leaf-not-record", inclusion, leaf_edit(lambda r: r.update(extra=1)))
    edited("leaf-float", inclusion, leaf_edit(lambda r: r["backend"].update(version=1.5)))
    edited("leaf-not-json", inclusion, lambda d: d.update(leaf="hello"))
    edited("leaf-non-ascii", inclusion, lambda d: d.update(leaf=d["leaf"].replace("alice", "\u00e9lice")))
    edited("leaf-number", inclusion, lambda d: d.update(leaf=5))
    edited("format-unknown", inclusion, lambda d: d.update(format="sealtrace.ledger.inclusion-proof.v2"))
    edited("format-missing", inclusion, lambda d: d.pop("format"))
    edited("extra-field", inclusion, lambda d: d.update(extra=1))
    edited("not-object", inclusion, lambda d: None, text=lambda d: b"[]")
    edited("nan", inclusion, lambda d: None, text=lambda d: json.dumps(d).replace('"index": 2', '"index": NaN').encode())
    edited("duplicate-key", inclusion, lambda d: None,
           text=lambda d: json.dumps(d).replace('"index": 2', '"index": 3, "index": 2').encode())
    edited("nested-deep", inclusion, lambda d: d.update(extra=_nest(500)))
    edited("head-size-resigned", inclusion, lambda d: (d["tree_head"].update(tree_size=8), resign(d["tree_head"])))
    edited("head-root-resigned", inclusion, lambda d: (d["tree_head"].update(root_hash="6" * 64), resign(d["tree_head"])))
    edited("head-ledger-resigned", inclusion, lambda d: (d["tree_head"].update(ledger="7" * 32), resign(d["tree_head"])))
    edited("head-time-resigned", inclusion, lambda d: (d["tree_head"].update(timestamp=0), resign(d["tree_head"])))
    edited("head-time-float", inclusion, lambda d: d["tree_head"].update(timestamp=float(d["tree_head"]["timestamp"])))
    edited("head-previous-null", inclusion, lambda d: (d["tree_head"].update(previous=None), resign(d["tree_head"])))
    edited("head-root", inclusion, lambda d: d["tree_head"].update(root_hash="6" * 64))
    edited("head-keyid", inclusion, lambda d: d["tree_head"]["signature"].update(key_id="0" * 16))
    edited("head-signature", inclusion, lambda d: d["tree_head"]["signature"].update(signature="0" * 128))
    edited("head-algorithm", inclusion, lambda d: d["tree_head"]["signature"].update(algorithm="rsa"))
    edited("head-format", inclusion, lambda d: d["tree_head"].update(format="sealtrace.ledger.tree-head.v2"))
    edited("head-extra", inclusion, lambda d: d["tree_head"].update(extra=1))
    edited("head-size-zero-resigned", inclusion, lambda d: (d["tree_head"].update(tree_size=0), resign(d["tree_head"])))
    edited("c-identity", consistency, lambda d: None)
    edited("c-swapped", consistency, lambda d: d.update(first=d["second"], second=d["first"]))
    edited("c-proof-dropped", consistency, lambda d: d["proof"].pop())
    edited("c-proof-extra", consistency, lambda d: d["proof"].append("0" * 64))
    edited("c-proof-empty", consistency, lambda d: d.update(proof=[]))
    edited("c-proof-66", consistency, lambda d: d.update(proof=["0" * 64] * 66))
    edited("c-same-with-proof", same, lambda d: d.update(proof=["0" * 64]))
    edited("c-same-root-resigned", same, lambda d: (d["second"].update(root_hash="6" * 64), resign(d["second"])))
    edited("c-first-root-resigned", consistency, lambda d: (d["first"].update(root_hash="6" * 64), resign(d["first"])))
    edited("c-first-zero-resigned", consistency,
           lambda d: (d["first"].update(tree_size=0, root_hash=sha256_hex(b"")), resign(d["first"]), d.update(proof=[])))
    edited("c-first-zero-nonempty-resigned", consistency,
           lambda d: (d["first"].update(tree_size=0, root_hash=sha256_hex(b"")), resign(d["first"])))
    edited("c-other-ledger-resigned", consistency, lambda d: (d["first"].update(ledger="8" * 32), resign(d["first"])))
    edited("c-first-untrusted", consistency, lambda d: d.update(first=other["tree_head"]))
    edited("c-second-bad-signature", consistency, lambda d: d["second"]["signature"].update(signature="0" * 128))
    edited("c-size-float", consistency, lambda d: d["second"].update(tree_size=7.0))
    edited("c-no-format", consistency, lambda d: d.pop("format"))


FAMILIES: list[Callable[[CaseMaker], None]] = [container_cases, audit_cases, binding_cases, proof_cases]


def generate(material: Material, out: Path) -> list[Case]:
    """Every case of the corpus (files not yet written)."""
    cm = CaseMaker(material, out)
    for family in FAMILIES:
        family(cm)
    ids = Counter(c.id for c in cm.cases)
    duplicates = [i for i, n in ids.items() if n > 1]
    if duplicates:
        raise ValueError(f"duplicate case ids: {duplicates[:5]}")
    return cm.cases


def sample(cases: list[Case], n: int, seed: int = 18) -> list[Case]:
    """About n cases, every family represented (the hand-written families whole when small)."""
    by_family: dict[str, list[Case]] = {}
    for case in cases:
        by_family.setdefault(case.family, []).append(case)
    rng = random.Random(seed)
    share = max(1, n // len(by_family))
    chosen: list[Case] = []
    for family_cases in by_family.values():
        chosen.extend(family_cases if len(family_cases) <= share else rng.sample(family_cases, share))
    return chosen


# ------------------------------------------------------------------------------------------ comparing


def named_failure(check: str, verdict: dict[str, Any]) -> Any:
    """The part of a verdict both implementations must agree on when a check fails (exit 1)."""
    failures = verdict["failures"]
    if check in ("container", "binding"):
        return tuple(sorted({(f["kind"], str(f["where"])) for f in failures}))
    return failures[0]["where"] if failures else None


def outcome(check: str, verdict: dict[str, Any] | None, exit_code: int, detail: str) -> Outcome:
    if verdict is None or exit_code == 2:
        return Outcome(exit_code, None, (), detail)
    compared = {"container", "run", "root"}
    digests = tuple(sorted((k, v) for k, v in verdict["digests"].items() if k in compared)) if exit_code == 0 else ()
    return Outcome(exit_code, named_failure(check, verdict) if exit_code == 1 else None, digests, detail)


def run_sealtrace(case: Case) -> Outcome:
    code, out, err = sealtrace(*case.sealtrace_args())
    verdict = None
    if code in (0, 1) and out.strip():
        try:
            verdict = json.loads(out)
        except ValueError:
            verdict = None
    return outcome(case.check, verdict, code, err.strip()[-300:])


def run_sealverify(binary: Path, cases: list[Case], workdir: Path) -> dict[str, Outcome]:
    batch = workdir / "batch.jsonl"
    with batch.open("w") as f:
        for case in cases:
            f.write(json.dumps({"id": case.id, "args": case.sealverify_args()}) + "\n")
    done = subprocess.run([str(binary), "batch", str(batch)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"sealverify batch failed ({done.returncode}): {done.stderr[-2000:]}")
    results = {}
    for line in done.stdout.splitlines():
        item = json.loads(line)
        verdict = item["verdict"]
        detail = "; ".join(f["what"] for f in verdict["failures"])[-300:]
        results[item["id"]] = outcome(verdict["check"], verdict, verdict["exit_code"], detail)
    return results


@dataclass
class Disagreement:
    case: Case
    sealtrace: Outcome
    sealverify: Outcome | None

    def __str__(self) -> str:
        return (f"{self.case.id} ({' '.join(self.case.sealverify_args())}):\n"
                f"  sealtrace  exit {self.sealtrace.exit_code} {self.sealtrace.named} {self.sealtrace.digests} "
                f"{self.sealtrace.detail}\n"
                f"  sealverify exit {self.sealverify.exit_code if self.sealverify else None} "
                f"{self.sealverify.named if self.sealverify else None} "
                f"{self.sealverify.digests if self.sealverify else None} {self.sealverify.detail if self.sealverify else ''}")


@dataclass
class Report:
    cases: int
    by_family: Counter[str]
    by_exit: Counter[int]
    disagreements: list[Disagreement]
    seconds_sealtrace: float
    seconds_sealverify: float


def compare(cases: list[Case], binary: Path, workdir: Path) -> Report:
    """Write every case, run both implementations, and collect where they disagree."""
    for case in cases:
        case.write()
    start = time.perf_counter()
    theirs = run_sealverify(binary, cases, workdir)
    seconds_go = time.perf_counter() - start
    start = time.perf_counter()
    disagreements, by_exit = [], Counter[int]()
    for case in cases:
        ours = run_sealtrace(case)
        by_exit[ours.exit_code] += 1
        other = theirs.get(case.id)
        if other is None or (ours.exit_code, ours.named, ours.digests) != (other.exit_code, other.named, other.digests):
            disagreements.append(Disagreement(case, ours, other))
    seconds_py = time.perf_counter() - start
    return Report(len(cases), Counter(c.family for c in cases), by_exit, disagreements, seconds_py, seconds_go)


def build_verifier(out: Path) -> Path:
    """``go build`` the verifier into ``out`` (GOFLAGS=-mod=mod never needed: no requirements)."""
    binary = out / "sealverify"
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run(["go", "build", "-o", str(binary), "."], cwd=VERIFIER_DIR, check=True, env=env,
                   capture_output=True, text=True)
    return binary


def run(sample_size: int | None, keep: Path | None = None, binary: Path | None = None) -> Report:
    """Make the material, generate the cases (a sample of them, or all), and compare."""
    work = keep or Path(tempfile.mkdtemp(prefix="sealtrace-corpus-"))
    try:
        if keep is not None:  # a kept directory starts empty; a temporary one is made empty
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
        material = make_material(work / "material")
        cases = generate(material, work / "cases")
        if sample_size is not None:
            cases = sample(cases, sample_size)
        binary = binary or build_verifier(work)
        return compare(cases, binary, work)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


LIMIT = int(os.environ.get("CORPUS_SHOW", "50"))


def iter_report(report: Report) -> Iterator[str]:
    yield (f"{report.cases} cases, {len(report.disagreements)} disagreement(s); exit codes (sealtrace): "
           f"{dict(sorted(report.by_exit.items()))}; sealtrace {report.seconds_sealtrace:.1f} s in process, "
           f"sealverify {report.seconds_sealverify:.1f} s in one batch")
    for family, n in sorted(report.by_family.items()):
        yield f"  {family}: {n}"
    for d in report.disagreements[:LIMIT]:
        yield str(d)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sample", type=int, default=None, help="About N cases, every family represented.")
    parser.add_argument("--keep", type=Path, default=None, help="Work in this directory and keep it.")
    parser.add_argument("--binary", type=Path, default=None, help="A built sealverify (default: go build).")
    args = parser.parse_args(argv)
    report = run(args.sample, args.keep, args.binary)
    for line in iter_report(report):
        print(line)
    return 1 if report.disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
