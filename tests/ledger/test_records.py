"""The record format: built by new_record, checked by code on append and verify, and the same rules as
its JSON Schema (schemas/ledger.schema.json), which tests hold the code to."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealtrace.digest import canonical_json, tensor_digest
from sealtrace.ledger import RecordError, replay_link
from sealtrace.ledger.records import parse_record, record_leaf, record_problem, schema_problem
from tests.ledger.conftest import make_record


def test_new_record_names_values_by_their_tensor_digest() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    record = make_record(inputs={"x": x}, outputs={"y": [np.int64([1]), np.int64([2])], "none": None})
    assert record["inputs"]["x"] == {"kind": "tensor", "dtype": "<f4", "shape": [2, 3], "digest": tensor_digest(x)}
    assert record["outputs"]["y"]["kind"] == "sequence" and record["outputs"]["none"] == {"kind": "none", "digest": None}
    assert schema_problem(record, "record") is None and record_problem(record) is None
    leaf = record_leaf(record)
    assert leaf == canonical_json(record) and parse_record(leaf, "leaf") == record


def test_a_replay_record_links_to_what_it_replays_with_a_verdict() -> None:
    original = make_record(0)
    replay = make_record(0, kind="replay", audit="full", backend="reference",
                         links=[replay_link(original["id"], "within-tolerance", "max 2 ulp on 'y'")])
    assert record_problem(replay) is None and schema_problem(replay, "record") is None
    with pytest.raises(RecordError, match="replays"):
        make_record(0, kind="replay")
    with pytest.raises(RecordError, match="verdict"):
        make_record(0, links=[{"relation": "replays", "record": original["id"]}])


def test_parse_record_refuses_what_is_not_the_canonical_leaf_of_a_record() -> None:
    record = make_record(1)
    leaf = record_leaf(record)
    with pytest.raises(RecordError, match="canonical"):
        parse_record(json.dumps(record).encode(), "leaf")
    with pytest.raises(RecordError, match="not valid JSON"):
        parse_record(leaf[:-1], "leaf")
    with pytest.raises(RecordError, match="nested too deeply"):
        parse_record(b"[" * 100_000 + b"]" * 100_000, "leaf")
    with pytest.raises(RecordError, match="more than"):
        parse_record(b" " * (2 << 20), "leaf")
    floating = copy.deepcopy(record)
    floating["inputs"]["x"]["shape"] = [4.0]
    with pytest.raises(RecordError, match="shape"):
        parse_record(canonical_json(floating), "leaf")
    with pytest.raises(RecordError, match="non-standard"):
        parse_record(leaf.replace(b'"principal":"alice"', b'"principal":NaN'), "leaf")


# Mutations of a valid record: the code and the JSON Schema must accept and refuse the same ones.
_PATHS = [
    ("format",), ("id",), ("kind",), ("time",), ("principal",), ("model",), ("model", "name"),
    ("model", "container_digest"), ("model", "plan_digest"), ("backend",), ("backend", "version"), ("audit",),
    ("inputs",), ("inputs", "x"), ("inputs", "x", "kind"), ("inputs", "x", "dtype"), ("inputs", "x", "shape"),
    ("inputs", "x", "digest"), ("outputs", "s", "length"), ("outputs", "m", "size"), ("outputs", "n", "digest"),
    ("trail",), ("links",), ("links", 0), ("links", 0, "relation"), ("links", 0, "record"), ("links", 0, "verdict"),
    ("links", 0, "detail"), ("sealtrace_version",),
]
_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.just(2**63), st.just(1.5), st.text(max_size=3),
    st.sampled_from(["tensor", "sequence", "map", "none", "replay", "inference", "io", "full", "replays",
                     "identical", "a" * 32, "b" * 64, "B" * 64, "a" * 2000, "2025-01-31T12:00:00.000000Z"]),
    st.just([]), st.just([1, 2]), st.just({}), st.just({"kind": "none", "digest": None}),
)


# Values near each field's boundary, valid and not, so that both answers come up often.
_NEAR = {
    "id": ["a" * 32, "A" * 32, "a" * 31, "a" * 33], "kind": ["inference", "replay"],
    "time": ["2025-01-31T12:00:00.000000Z", "2025-01-31T12:00:00Z", "2025-01-31 12:00:00.000000Z"],
    "principal": [None, "bob", "x" * 1024, "x" * 1025], "name": ["", "n" * 1024, "n" * 1025],
    "container_digest": [None, "c" * 64, "C" * 64, "c" * 63], "plan_digest": ["d" * 64, None],
    "version": ["", "v" * 1024, "v" * 1025], "audit": ["full", "deferred", "io", "none"],
    "dtype": ["str", "<f4", "t" * 64, "t" * 65], "shape": [[], [0], [2**63 - 1], [2**63], [-1], [True], [1] * 64, [1] * 65],
    "digest": [None, "e" * 64, "e" * 65], "length": [0, 2**63 - 1, -1, True], "size": [0, 5, -2, None],
    "trail": [None, "f" * 64, "f" * 63], "links": [[], [None]], "relation": ["replays", "replayed"],
    "record": ["a" * 32, "a" * 31], "verdict": ["identical", "within-tolerance", "diverged", "failed", "ok"],
    "detail": ["", "d" * 1024, "d" * 1025], "sealtrace_version": ["1", "s" * 64, "s" * 65],
    "inputs": [{}, {"": {"kind": "none", "digest": None}}, {"k" * 1024: {"kind": "none", "digest": None}}],
}


def _value_for(path: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    near = _NEAR.get(str(path[-1]))
    return st.one_of(_VALUES, st.just("<delete>"), *([st.sampled_from(near)] * 8 if near else []))


def _base() -> dict[str, Any]:
    original = make_record(0)
    return make_record(
        1, kind="replay", trail="c" * 64,
        outputs={"s": [np.float32([1])], "m": {"a": np.float32([1])}, "n": None},
        links=[replay_link(original["id"], "identical", "bit for bit")],
    )


@given(st.lists(st.sampled_from(_PATHS).flatmap(lambda p: st.tuples(st.just(p), _value_for(p))), min_size=1, max_size=2),
       st.sampled_from([None, None, None, "extra"]))
@settings(max_examples=400, deadline=None)
def test_the_code_and_the_schema_agree(mutations: list[tuple[tuple[Any, ...], Any]], extra: str | None) -> None:
    record = _base()
    for path, value in mutations:
        target: Any = record
        for key in path[:-1]:
            if (isinstance(target, dict) and key in target) or (isinstance(target, list) and isinstance(key, int) and key < len(target)):
                target = target[key]
            else:
                break
        else:
            last = path[-1]
            if isinstance(target, dict):
                if value == "<delete>":
                    target.pop(last, None)
                else:
                    target[last] = copy.deepcopy(value)
            elif isinstance(target, list) and isinstance(last, int) and last < len(target):
                target[last] = copy.deepcopy(value) if value != "<delete>" else None
    if extra:
        record[extra] = 1
    by_code = record_problem(record)
    by_schema = schema_problem(record, "record")
    assert (by_code is None) == (by_schema is None), (by_code, by_schema, record)


def _set(record: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target: Any = record
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = copy.deepcopy(value)


@pytest.mark.parametrize("path", _PATHS, ids=lambda p: "/".join(map(str, p)))
def test_the_code_and_the_schema_agree_at_each_boundary(path: tuple[Any, ...]) -> None:
    answers = set()
    for value in [*_NEAR.get(str(path[-1]), []), None, 0, "", [], {}]:
        record = _base()
        _set(record, path, value)
        by_code, by_schema = record_problem(record), schema_problem(record, "record")
        assert (by_code is None) == (by_schema is None), (path, value, by_code, by_schema)
        answers.add(by_code is None)
    if str(path[-1]) in _NEAR and path[-1] not in ("links", "inputs") and path != ("inputs", "x", "kind"):
        assert answers == {True, False}, path  # each boundary list holds values on both sides
