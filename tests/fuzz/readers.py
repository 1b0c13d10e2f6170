"""Every reader of outside bytes, as the fuzz suite drives it: which seed file is mutated, how.

A reader is a CLI command (run in-process through ``sealtrace.cli.main``, so the exit code is what a
user sees) or, where no verb reads the format quickly, an API call whose exceptions map to exit
codes the way the CLI maps them. ``signed`` readers check data under a signature or a digest:
accepting a mutation there is a trust failure, unless ``same`` says the mutated bytes mean the same
(a sidecar is ordinary JSON, so re-indenting it changes nothing that is signed).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.fuzz.material import Material
from tests.fuzz.mutations import (
    Mutation,
    byte_edits,
    json_edits,
    line_edits,
    npy_header_edits,
    text_token_edits,
)


def _same_json(a: bytes, b: bytes) -> bool:
    try:
        return bool(json.loads(a) == json.loads(b))
    except (ValueError, RecursionError):
        return False


def _same_npz_arrays(a: bytes, b: bytes) -> bool:
    """The same arrays (names, dtypes, shapes, values) in two .npz archives: what a format 3
    manifest vouches for, so other bytes holding them are a re-layout (zip timestamps, comments)."""
    import io

    import numpy as np

    try:
        with np.load(io.BytesIO(a)) as first, np.load(io.BytesIO(b)) as second:
            return sorted(first.files) == sorted(second.files) and all(
                first[k].dtype == second[k].dtype and first[k].shape == second[k].shape
                and first[k].tobytes() == second[k].tobytes()
                for k in first.files
            )  # fmt: skip
    except Exception:  # whatever NumPy or zipfile raise for the mutated archive
        return False


def _same_model(a: bytes, b: bytes) -> bool:
    """The same model runs: equal after deterministic re-encoding (protobuf accepts several encodings
    of one message), leaving out the embedded binding record, which the sidecar supersedes and the
    artifact digest excludes (docs/binding.md)."""
    from onnx import ModelProto

    from sealtrace.binding import METADATA_KEY

    models = []
    for data in (a, b):
        model = ModelProto()
        try:
            model.ParseFromString(data)
        except Exception:  # protobuf's decode errors
            return False
        kept = [p for p in model.metadata_props if p.key != METADATA_KEY]
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        models.append(model.SerializeToString(deterministic=True))
    return models[0] == models[1]


def _same_unsigned_content(a: bytes, b: bytes) -> bool:
    """For readers given no key: the same log once the footer's signature is left out. The signature
    is not under the chain (it signs the chain's head); without a key nothing can check it, and such
    a reader says so rather than vouching for the key id it claims."""

    def content(data: bytes) -> list[Any] | None:
        try:
            records = [json.loads(line) for line in data.split(b"\n") if line]
        except (ValueError, RecursionError):
            return None
        if records and isinstance(records[-1], dict):
            records[-1] = {k: v for k, v in records[-1].items() if k != "signature"}
        return records

    left = content(a)
    return left is not None and left == content(b)


def _same_rows(a: bytes, b: bytes) -> bool:
    """A SQLite file is pages with free space and slack, its schema is SQL text in which names and
    keywords are case-insensitive: the same rows in every table (a table that is gone held none) is
    the same store. Whatever cannot be read back counts as a change."""
    import sqlite3
    import tempfile

    def tables(path: Path) -> dict[bytes, list[str]]:
        found: dict[bytes, list[str]] = {}
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            db.text_factory = bytes
            # CAST: a schema row whose type a byte flip turned from text into a blob is still a table.
            query = "SELECT name FROM sqlite_master WHERE CAST(type AS TEXT) = 'table'"
            for (name,) in db.execute(query).fetchall():
                quoted = name.decode("utf-8").replace('"', '""')
                # Columns renamed c0, c1 ...: a column name the schema text spells in bytes that are
                # not UTF-8 is still the same column (Python's sqlite3 would fail decoding it).
                width = len(db.execute(f'PRAGMA table_info("{quoted}")').fetchall())
                columns = ", ".join(f"c{i}" for i in range(width))
                query = f'WITH t({columns}) AS (SELECT * FROM "{quoted}") SELECT * FROM t'
                rows = sorted(repr(row) for row in db.execute(query))
                if rows:
                    found[name.lower()] = rows
        return found

    with tempfile.TemporaryDirectory() as tmp:
        dumps = []
        for i, data in enumerate((a, b)):
            path = Path(tmp) / f"{i}.db"
            path.write_bytes(data)
            try:
                dumps.append(tables(path))
            except Exception:  # sqlite3 errors, a table name that is not UTF-8 ...
                return False
    return dumps[0] == dumps[1]


def _load_vnnlib(path: Path) -> None:
    from sealtrace.falsify import load_vnnlib

    load_vnnlib(path)


def _tiny_specs() -> tuple[dict[str, Any], dict[str, Any]]:
    import numpy as np

    from sealtrace.serve.protocol import TensorSpec

    return ({"x": TensorSpec("x", "FP32", (1, 2), np.dtype(np.float32))},
            {"out": TensorSpec("out", "FP32", (1, 3), np.dtype(np.float32))})


def _parse_json_request(path: Path) -> None:
    from sealtrace.serve.protocol import parse_request

    parse_request(path.read_bytes(), None, *_tiny_specs())


def _parse_binary_request(path: Path) -> None:
    from sealtrace.serve.protocol import parse_request

    data = path.read_bytes()
    length, _, body = data.partition(b"\n")  # the header length as a client sends it, then the body
    parse_request(body, length.decode("latin-1"), *_tiny_specs())


@dataclass(frozen=True)
class Reader:
    """One way sealtrace reads one kind of outside file."""

    name: str
    target: Callable[[Material], Path]
    mutations: Mutation
    argv: Callable[[Material], list[str]] | None = None
    api: Callable[[Path], None] | None = None
    signed: bool = False
    same: Callable[[bytes, bytes], bool] | None = None


def _capture_file(m: Material, suffix: str) -> Path:
    return next(p for p in sorted(m.capture_b.iterdir()) if p.suffix == suffix and p.name != "index.json")


READERS: tuple[Reader, ...] = (
    Reader("container-verify", lambda m: m.container, byte_edits,
           lambda m: ["verify", str(m.container), "--trust", str(m.public_key)], signed=True),
    Reader("container-run", lambda m: m.container, byte_edits,
           lambda m: ["run", str(m.container), "--input", f"x={m.feed}", "--trust", str(m.public_key)], signed=True),
    Reader("container-inspect", lambda m: m.container, byte_edits, lambda m: ["inspect", str(m.container)]),
    Reader("onnx-model", lambda m: m.model, byte_edits, lambda m: ["run", str(m.model), "--random-inputs"]),
    Reader("audit-verify", lambda m: m.log, line_edits,
           lambda m: ["audit", "verify", str(m.log), "--container", str(m.container), "--trust", str(m.public_key)],
           signed=True),
    Reader("audit-show", lambda m: m.log, line_edits, lambda m: ["audit", "show", str(m.log)], signed=True,
           same=_same_unsigned_content),
    Reader("replay", lambda m: m.log, line_edits,
           lambda m: ["replay", str(m.log), "--container", str(m.container), "--trust", str(m.public_key)],
           signed=True),
    Reader("diff-audit-logs", lambda m: m.log, line_edits, lambda m: ["diff", str(m.log), str(m.log) + ".orig"],
           signed=True, same=_same_unsigned_content),
    Reader("capture-index", lambda m: m.capture_b / "index.json", json_edits,
           lambda m: ["diff", str(m.capture), str(m.capture_b)]),
    Reader("audit-verify-blake3", lambda m: m.log_blake3, line_edits,
           lambda m: ["audit", "verify", str(m.log_blake3), "--container", str(m.container), "--trust",
                      str(m.public_key)], signed=True),
    Reader("capture-index-v3", lambda m: m.capture_blake3_b / "index.json", json_edits,
           lambda m: ["diff", str(m.capture_blake3), str(m.capture_blake3_b)]),
    Reader("capture-npy", lambda m: _capture_file(m, ".npy"), npy_header_edits,
           lambda m: ["diff", str(m.capture), str(m.capture_b)]),
    Reader("binding-sidecar", lambda m: m.sidecar, json_edits,
           lambda m: ["check-binding", str(m.artifact), "--container", str(m.container), "--trust", str(m.public_key)],
           signed=True, same=_same_json),
    Reader("bound-artifact", lambda m: m.artifact, byte_edits,
           lambda m: ["run", str(m.artifact), "--container", str(m.container), "--trust", str(m.public_key),
                      "--input", f"x={m.feed}"],
           signed=True, same=_same_model),
    Reader("manifest", lambda m: m.manifest, json_edits,
           lambda m: ["manifest", "verify", str(m.checkpoint), str(m.manifest), "--trust", str(m.public_key)],
           signed=True),
    Reader("manifest-npz", lambda m: m.checkpoint / "optimizer.npz", byte_edits,
           lambda m: ["manifest", "verify", str(m.checkpoint), str(m.manifest), "--trust", str(m.public_key)],
           signed=True, same=_same_npz_arrays),
    Reader("manifest-create-npy", lambda m: m.checkpoint / "step.npy", npy_header_edits,
           lambda m: ["manifest", "create", str(m.checkpoint), "-o", str(m.root / "fuzzed.manifest.json"), "--force"]),
    Reader("npy-input", lambda m: m.feed, npy_header_edits,
           lambda m: ["run", str(m.model), "--input", f"x={m.feed}"]),
    Reader("npz-input", lambda m: m.feeds, byte_edits, lambda m: ["run", str(m.model), "--inputs", str(m.feeds)]),
    Reader("vnnlib", lambda m: m.vnnlib, text_token_edits, api=_load_vnnlib),
    Reader("ledger-proof", lambda m: m.proof, json_edits,
           lambda m: ["ledger", "check-proof", str(m.proof), "--trust", str(m.public_key)], signed=True,
           same=_same_json),
    Reader("ledger-consistency", lambda m: m.consistency, json_edits,
           lambda m: ["ledger", "check-proof", str(m.consistency), "--trust", str(m.public_key)], signed=True,
           same=_same_json),
    Reader("ledger-store", lambda m: m.ledger, byte_edits,
           lambda m: ["ledger", "verify", str(m.ledger), "--trust", str(m.public_key), "--known", str(m.proof)],
           signed=True, same=_same_rows),
    Reader("oip-json-request", lambda m: m.request_json, json_edits, api=_parse_json_request),
    Reader("oip-binary-request", lambda m: m.request_binary, byte_edits, api=_parse_binary_request),
)

BY_NAME = {reader.name: reader for reader in READERS}
