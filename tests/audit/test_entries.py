"""The fast path of step records: text equal to canonical JSON of the dict form, digests equal to
tensor_digest, and the recorder's helpers and constant-step caches giving the same log."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace.audit import AuditRecorder, audited_run, verify_log
from sealtrace.audit import recorder as recorder_module
from sealtrace.audit.entries import StepTemplate, tensor_entry
from sealtrace.audit.records import value_summary
from sealtrace.digest import canonical_json, tensor_digest
from sealtrace.plan.model import Plan
from sealtrace.session import Session
from tests.audit.test_recorder import _big_chain
from tests.conftest import make_model

NAME = 'out "1" %s \u00e9'


def entry_text(value: Any, sample: int) -> str:
    head, tail, _ = tensor_entry(value, sample)
    return head + canonical_json(NAME).decode("ascii") + tail


def reference_text(value: Any, sample: int) -> str:
    return canonical_json({"name": NAME, **value_summary(value, sample)}).decode("ascii")


def values() -> list[Any]:
    rng = np.random.default_rng(7)
    finfo = np.finfo(np.float32)
    return [
        rng.standard_normal((3, 4)).astype(np.float32),
        rng.standard_normal(9).astype(np.float16),
        rng.standard_normal((2, 2, 2)),
        np.array(3.5, np.float32),  # rank 0
        np.zeros((0, 3), np.float32),  # empty
        np.array([-0.0, 1e20, 1e-30, finfo.tiny, finfo.max], np.float32),
        np.full(4, finfo.min, np.float32),  # a float32 sum would overflow: float64 mean
        np.array([1e308, 1e308]),  # a float64 sum that overflows
        np.array([1.0, np.nan, np.inf, -np.inf, 2.0], np.float32),  # non-finite: the general path
        np.array([np.nan, np.nan], np.float32),
        np.arange(12, dtype=np.float32).reshape(3, 4).T,  # non-contiguous
        np.arange(5, dtype=">f4"),  # big-endian
        np.arange(-5, 5, dtype=np.int8),
        np.array([0, 2**64 - 1], np.uint64),
        np.array([-(2**63), 2**63 - 1], np.int64),
        np.array([[True, False, True]]),
        np.array(["ab", "\u00e9"], dtype=object),
        np.array([1 + 2j, 3 - 4j]),
        [np.zeros(2, np.float32), np.ones(1, np.int64)],
        None,
    ]


@pytest.mark.parametrize("sample", [0, 1, 3, 8, 100])
def test_fast_entries_equal_the_canonical_json_of_the_dict_form(sample: int) -> None:
    for value in values():
        assert entry_text(value, sample) == reference_text(value, sample), repr(value)
        assert tensor_entry(value, sample)[2] == value_summary(value, sample)["digest"]


def test_fast_digests_equal_tensor_digest_on_random_tensors() -> None:
    rng = np.random.default_rng(11)
    for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_):
        for _ in range(20):
            shape = tuple(int(d) for d in rng.integers(0, 5, size=int(rng.integers(0, 4))))
            array = (rng.standard_normal(shape) * 100).astype(dtype)
            assert tensor_entry(array, 4)[2] == tensor_digest(array)
            assert entry_text(array, 4) == reference_text(array, 4)


def test_step_template_fills_in_canonical_json() -> None:
    nodes = [helper.make_node("Relu", ["x", ""], ['y%"\u00e9'], name='re"lu%d', domain="")]
    plan = Session(
        make_model(
            nodes,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info('y%"\u00e9', TensorProto.FLOAT, [2])],
        )
    ).plan
    step = plan.steps[0]
    template = StepTemplate(step)
    head, tail, _ = tensor_entry(np.ones(2, np.float32), 8)
    inputs = ",".join(['{"digest":"' + "ab" * 32 + template.inputs[0][1], template.inputs[1][2]])
    outputs = head + template.outputs[0][1] + tail
    body = template.fmt % (inputs, outputs, '["a","b","0"]', "cd" * 32, 7)
    record = json.loads(body)
    assert canonical_json(record).decode("ascii") == body
    assert record["name"] == 're"lu%d' and record["seq"] == 7 and record["path"] == ["a", "b", "0"]
    assert record["inputs"] == [{"name": "x", "digest": "ab" * 32}, {"name": "", "digest": None}]
    assert record["since_version"] == step.since_version and record["step"] == step.index
    # A constant step's record: the text up to its outputs, then path, prev and seq, then the rest.
    known = template.head % (inputs, outputs)
    assert known + ',"path":["a","b","0"],"prev":"' + "cd" * 32 + '","seq":7' + template.rest == body


def test_helpers_make_the_same_log(monkeypatch: pytest.MonkeyPatch) -> None:
    size = 1 << 16
    session = Session(_big_chain(40, size))
    feeds = {"v0": np.zeros(size, np.float32)}
    alone = AuditRecorder(None, hash_threads=0)
    audited_run(session, feeds, audit=alone)
    # Every output goes to the helpers (which take some, the worker takes back the rest).
    monkeypatch.setattr(recorder_module, "AHEAD_BYTES", 0)
    monkeypatch.setattr(recorder_module, "PARALLEL_MIN_BYTES", 1)
    helped = AuditRecorder(None, hash_threads=2, max_pending_bytes=8 * size * 4)
    audited_run(session, feeds, audit=helped)

    def steps(records: list[dict[str, Any]]) -> list[Any]:
        return [(r["name"], r["inputs"], r["outputs"]) for r in records if r["type"] == "step"]

    assert steps(helped.records) == steps(alone.records)
    assert helped.records[-1]["outputs"][0]["digest"] == tensor_digest(np.full(size, 40, np.float32))
    assert 0 < helped.peak_pending_bytes <= 8 * size * 4


class _Event(NamedTuple):
    """A StepEvent as a backend that folds constants reports it (``constant`` set)."""

    path: tuple[str, ...]
    step: Any
    inputs: Sequence[Any]
    outputs: Sequence[Any]
    constant: bool = False


class _Backend:
    name = "test"
    version = "0"
    per_step = True


def test_constant_step_outputs_are_summarized_once_by_identity(tmp_path: Any) -> None:
    plan = Session(_big_chain(2, 3)).plan
    weight = np.arange(3, dtype=np.float32)
    weight.setflags(write=False)
    writeable = np.arange(3, dtype=np.float32)
    facts = recorder_module.plan_facts(plan)
    logs = []
    for run in range(2):
        log = tmp_path / f"{run}.jsonl"
        recorder = AuditRecorder(log)
        feeds: Mapping[str, Any] = {"v0": np.zeros(3, np.float32)}
        recorder.on_run_start(plan, feeds, _Backend())  # type: ignore[arg-type]
        # A backend that folded the first step reports the same read-only array every run.
        first, second = plan.steps
        recorder.on_step(_Event((), first, [feeds["v0"], None], [weight], constant=True))  # type: ignore[arg-type]
        # A "constant" output that is writeable is not trusted to stay the same: hashed afresh.
        writeable[0] = run
        recorder.on_step(_Event((), second, [weight, None], [writeable], constant=True))  # type: ignore[arg-type]
        recorder.on_run_end({"v2": writeable})
        logs.append([json.loads(line) for line in log.read_text().splitlines()])
        assert verify_log(log).ok
    assert len([k for k in facts._constant_entries if k[0] == id(weight)]) == 1
    # The first step's whole record is kept (all but path, prev and seq); not the second's,
    # whose "constant" output is writeable.
    assert id(plan.steps[0]) in facts.constant_records and id(plan.steps[1]) not in facts.constant_records
    first, second = ({k: v for k, v in log[1].items() if k not in ("digest", "prev")} for log in logs)
    assert first == second
    assert [log[1]["outputs"][0]["digest"] for log in logs] == [tensor_digest(weight)] * 2
    assert [log[2]["outputs"][0]["digest"] for log in logs] == [
        tensor_digest(np.array([0, 1, 2], np.float32)),
        tensor_digest(np.array([1, 1, 2], np.float32)),
    ]
    assert logs[0][2]["inputs"][0]["digest"] == tensor_digest(weight)
    del weight
    assert not [k for k, (ref, _) in facts._constant_entries.items() if ref() is None]


def test_plan_owned_views_are_summarized_once_per_plan() -> None:
    # Without folding (another backend, or none), a Constant step returns a read-only view of the
    # array the Plan owns: the same bytes every run, summarized once per Plan.
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [
        helper.make_node("Constant", [], ["c"], name="const", value=numpy_helper.from_array(value)),
        helper.make_node("Add", ["x", "c"], ["y"], name="add"),
    ]
    plan: Plan = Session(
        make_model(
            nodes,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        )
    ).plan
    facts = recorder_module.plan_facts(plan)
    owned = np.asarray(plan.steps[0].attributes["value"])
    view = owned.view()
    view.setflags(write=False)
    first = facts.owned_entry(view, 8)
    again = view.view()
    assert first is not None and facts.owned_entry(again, 8) is first
    assert first[2] == tensor_digest(value)
    assert facts.owned_entry(np.array(value), 8) is None  # a fresh array: not the Plan's


def test_sealed_records_are_canonical_json_with_the_digest_spliced_in() -> None:
    import random

    from sealtrace.audit.records import record_digest, seal_record

    rng = random.Random(3)
    values: list[Any] = [1, "x\u00e9\"%", [1, {"b": 2}], None, {"k": "v"}, 2.5]
    for seq in range(500):
        keys = rng.sample(["a", "backend", "zz", "format", "dz", "e", "host", "inputs"], rng.randint(0, 6))
        record = {k: rng.choice(values) for k in keys}
        record["type"] = rng.choice(["header", "footer", "step"])
        line = seal_record(record, seq, "ab" * 32)
        parsed = json.loads(line)
        assert canonical_json(parsed) == line
        own = "chain_head" if record["type"] == "footer" else "digest"
        assert parsed[own] == record_digest(parsed)


def test_small_tensor_stats_in_python_equal_the_reductions() -> None:
    # Fewer than 8 values: stats from tolist() in Python, bit for bit the NumPy reductions' (the
    # general path), -0.0, float16, float32 sums near overflow and huge integers included.
    rng = np.random.default_rng(16)
    finfo = np.finfo(np.float32)
    cases: list[np.ndarray] = [
        np.array([-0.0], np.float32), np.array([-0.0, -0.0], np.float64), np.array([finfo.max, finfo.max / 4], np.float32),
        np.array([2**63 - 1, 2**63 - 2], np.int64), np.array([2**64 - 1], np.uint64), np.array([True, False]),
        np.array([1e308, 1e308]), np.array([65504.0, 65504.0], np.float16),
    ]
    for trial in range(600):
        n = int(rng.integers(1, 8))
        dtype = [np.float32, np.float16, np.float64, np.int64, np.int8, np.uint16][trial % 6]
        if np.dtype(dtype).kind == "f":
            cases.append((rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30)).astype(dtype))
        else:
            info = np.iinfo(dtype)
            cases.append(rng.integers(info.min, info.max, size=n, dtype=dtype, endpoint=True))
    with np.errstate(over="ignore"):
        for value in cases:
            for sample in (0, 3, 8):
                assert entry_text(value, sample) == reference_text(value, sample), value


def _sample_lists() -> list[list[Any]]:
    """Samples as the recorder takes them (``tolist()`` of float16/32/64 and integer tensors), every
    decimal exponent of float64 and float32 included, and the forms where orjson and repr differ."""
    rng = np.random.default_rng(21)
    lists: list[list[Any]] = [
        [1e-05, 1e-07, -3.5e-06, 0.0001, 9.99e-05],
        [1e16, 1e15, 123456789012345678.0, 1e22, -0.0, 0.0, 5e-324, 1.5e-300, 0.1],
        [float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny), float(np.finfo(np.float16).max)],
        [2**63 - 1, -(2**63), 2**64 - 1, 0, -1],
        [],
    ]
    for exponent in range(-320, 309):
        mantissas = rng.uniform(1.0, 10.0, 8) * rng.choice([-1.0, 1.0], 8)
        with np.errstate(over="ignore", under="ignore"):
            values = mantissas * 10.0**exponent
        for dtype in (np.float64, np.float32, np.float16):
            with np.errstate(over="ignore", under="ignore"):
                cast = values.astype(dtype)
            lists.append([v for v in cast.tolist() if np.isfinite(v)])
    for dtype in (np.int8, np.uint8, np.int32, np.int64, np.uint64):
        info = np.iinfo(dtype)
        lists.append(rng.integers(info.min, info.max, size=8, dtype=dtype, endpoint=True).tolist())
    return lists


@pytest.mark.parametrize("encoder", ["orjson", "repr"])
def test_sample_json_is_canonical_json_with_either_encoder(encoder: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sample list is written by orjson where its text equals repr's, which is what canonical
    # JSON (json.dumps) writes for a list of finite floats and ints; the two differ on numbers
    # below 1e-4 (0.00001 for 1e-05, 1e-7 for 1e-07), which must go through repr.
    from sealtrace.audit import entries

    if encoder == "repr":
        monkeypatch.setattr(entries, "_orjson_dumps", None)
    else:
        pytest.importorskip("orjson")
    for values in _sample_lists():
        assert entries.list_json(values) == canonical_json(values).decode("ascii"), values


def test_entries_of_small_magnitudes_equal_the_general_path() -> None:
    # Samples whose numbers orjson writes in another form than repr (1e-05, 1e-07) and the
    # neighbouring magnitudes, through the whole entry: byte for byte the general path's text.
    for exponent in range(-12, 3):
        for dtype in (np.float32, np.float64):
            value = (np.arange(1, 20, dtype=np.float64) * 10.0**exponent).astype(dtype)
            assert entry_text(value, 8) == reference_text(value, 8), (exponent, dtype)


def test_entries_of_views_equal_the_general_path() -> None:
    # Outputs that are views (Transpose, Expand, Unsqueeze of a view: MiniLM makes 52 per run)
    # take the fast path too: digest and sample from the C-order copy, statistics from the view
    # itself, byte for byte what the general path writes.
    rng = np.random.default_rng(5)
    base = rng.standard_normal((6, 10, 7))
    views: list[np.ndarray] = []
    for dtype in (np.float16, np.float32, np.float64, np.int8, np.int64, np.uint16, np.bool_):
        typed = (base * 1e3).astype(dtype) if np.dtype(dtype).kind in "iu" else base.astype(dtype)
        if dtype is np.bool_:
            typed = base > 0
        views += [
            typed.transpose(2, 0, 1),
            typed[::-1, ::2],
            typed[:, 3],
            np.broadcast_to(typed[:1, :1], (4, 5, 7)),
            typed.T[:1, :2, :3],  # fewer than 8 values: the general path
        ]
    with_nan = base.astype(np.float32).transpose(1, 0, 2).copy().transpose(1, 0, 2)
    with_nan[0, 0, 0] = np.nan
    views.append(with_nan.T)
    for view in views:
        assert not view.flags.c_contiguous
        for sample in (0, 8):
            assert entry_text(view, sample) == reference_text(view, sample), (view.dtype, view.shape, view.strides)
