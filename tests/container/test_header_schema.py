"""The container reader and the header's JSON Schema (src/sealtrace/schemas/container-header.schema.json)
accept and refuse the same headers. The reader checks in code on every open (the schema check costs ~10x
the open on headers of thousands of tensors); this holds the two to one definition, as the ledger's record
checks are held to theirs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sealtrace.container import seal_model
from sealtrace.container.format import open_container
from sealtrace.errors import SealtraceError
from tests.container.conftest import edited, split, tiny_model

jsonschema = pytest.importorskip("jsonschema")
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "src" / "sealtrace" / "schemas" / "container-header.schema.json").read_text()
)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(header: dict[str, Any]) -> None:
        node = header
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def edit(header: dict[str, Any]) -> None:
        node = header
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return edit


EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "unchanged": lambda header: None,
    "chunk size a string": _set(("container", "chunk_size"), "16"),
    "chunk size negative": _set(("container", "chunk_size"), -1),
    "alignment a float": _set(("container", "alignment"), 64.5),
    "unknown top-level key": _set(("container", "extra"), 1),
    "format misnamed": _set(("container", "format"), "other"),
    "plan digest not hex": _set(("container", "plan_digest"), "z" * 64),
    "plan digest short": _set(("container", "plan_digest"), "a" * 63),
    "plan digest missing": _drop(("container", "plan_digest")),
    "sections missing": _drop(("container", "sections")),
    "section offset negative": _set(("container", "sections", 0, "offset"), -64),
    "section digests not a list": _set(("container", "sections", 0, "sha256"), "a" * 64),
    "section unknown key": _set(("container", "sections", 0, "extra"), True),
    "tensor dtype a number": _set(("container", "tensors", 0, "dtype"), 1),
    "tensor name empty": _set(("container", "tensors", 0, "name"), ""),
    "model ir version a string": _set(("container", "model", "ir_version"), "10"),
    "signatures not a list": _set(("signatures",), {}),
}


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("schema") / "tiny.seal"
    seal_model(tiny_model(), path)
    return path.read_bytes()


@pytest.mark.parametrize("name", list(EDITS))
def test_the_reader_and_the_schema_agree(sealed: bytes, name: str) -> None:
    data = edited(sealed, EDITS[name])
    header, _ = split(data)
    schema_refuses = not jsonschema.Draft202012Validator(SCHEMA).is_valid(header)
    try:
        with open_container(data):
            reader_refuses = False
    except SealtraceError:
        reader_refuses = True
    assert reader_refuses == schema_refuses, (name, schema_refuses)
    assert reader_refuses == (name != "unchanged")
