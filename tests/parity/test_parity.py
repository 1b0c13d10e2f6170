"""Per-op parity: metrics, drift origin, born-here vs inherited, layout flips, reports."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sealtrace import build_plan, zoo
from sealtrace.backends.reference import ReferenceBackend
from sealtrace.cli import main
from sealtrace.errors import InputError
from sealtrace.ops.registry import Kernel
from sealtrace.parity import Tolerance, ToleranceTable, check_parity, compare_values
from sealtrace.parity.metrics import ulp_distance
from sealtrace.parity.report import report_html, report_json, report_markdown
from sealtrace.plan import Plan
from sealtrace.plan.events import StepObserver
from tests.conftest import make_model, require_material


class AlteredBackend(ReferenceBackend):
    """The reference backend with one step's kernel replaced: a stand-in for a faulty runtime."""

    name = "altered"

    def __init__(self, step_name: str, alter: Callable[[Any], Any]) -> None:
        super().__init__()
        self.step_name = step_name
        self.alter = alter

    def run(self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver] = ()) -> dict[str, Any]:
        steps = []
        for step in plan.steps:
            if step.name == self.step_name:
                original = step.kernel.fn

                def wrong(*args: Any, _fn: Callable[..., Any] = original, **kwargs: Any) -> Any:
                    return self.alter(_fn(*args, **kwargs))

                step = dataclasses.replace(step, kernel=Kernel(step.domain, step.op_type, step.since_version, wrong, False))
            steps.append(step)
        return super().run(dataclasses.replace(plan, steps=tuple(steps)), feeds, observers)


def conv_net() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w1"),
        numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3, "w2"),
        numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32) * 0.3, "w3"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], name="conv3"),
        helper.make_node("Sigmoid", ["c3"], ["y"], name="sigmoid"),
    ]
    return make_model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        weights,
    )


FEEDS = {"x": np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)}


def test_reference_and_onnxruntime_agree_on_a_conv_net() -> None:
    report = check_parity(conv_net(), FEEDS)
    assert report.passed and report.drift_origin is None
    assert [s.op_type for s in report.steps] == ["Conv", "Relu", "Conv", "Relu", "Conv", "Sigmoid"]
    assert all(s.status == "ok" and s.local is not None for s in report.steps)


def test_extra_observers_watch_the_compared_run_without_changing_the_report() -> None:
    # The CLI's progress bar is such an observer: it sees every top-level step once, in order.
    from tests.conftest import StepRecorder

    recorder = StepRecorder()
    watched = check_parity(conv_net(), FEEDS, observers=[recorder])
    assert [e.step.name for e in recorder.events if not e.path] == [s.name for s in watched.steps]
    assert report_json(watched) == report_json(check_parity(conv_net(), FEEDS))


def test_injected_fault_is_the_drift_origin_and_born_there() -> None:
    faulty = AlteredBackend("conv2", lambda y: y + np.float32(0.05))
    report = check_parity(conv_net(), FEEDS, ["reference", faulty])
    assert not report.passed
    origin = report.drift_origin
    assert origin is not None and origin.name == "conv2"
    assert [s.name for s in report.born_here] == ["conv2"]
    statuses = {s.name: s.status for s in report.steps}
    assert statuses["conv1"] == statuses["relu1"] == "ok"
    assert statuses["conv2"] == "born-here"
    assert statuses["relu2"] == statuses["conv3"] == statuses["sigmoid"] == "inherited"


@pytest.mark.slow
def test_injected_fault_in_a_real_model() -> None:
    real = zoo.model("ppocr-cls")
    path = require_material(lambda: real.path)
    plan = build_plan(path)
    convs = [s.name for s in plan.steps if s.op_type == "Conv"]
    target = convs[len(convs) // 2]
    faulty = AlteredBackend(target, lambda y: y * np.float32(1.01))
    report = check_parity(plan, real.inputs(), ["reference", faulty])
    assert report.drift_origin is not None and report.drift_origin.name == target
    assert report.born_here[0].name == target
    after = [s for s in report.steps if s.position > report.drift_origin.position and s.exceeds]
    assert after and all(s.status in ("inherited", "born-here") for s in after)
    assert sum(1 for s in after if s.status == "inherited") >= len(after) // 2


def test_layout_flip_is_reported() -> None:
    # The faulty runtime hands back the last step's output in NHWC order instead of NCHW.
    flipped = AlteredBackend("sigmoid", lambda y: np.ascontiguousarray(y.transpose(0, 2, 3, 1)))
    report = check_parity(conv_net(), FEEDS, ["reference", flipped], local=False)
    last = report.steps[-1]
    assert last.name == "sigmoid" and last.exceeds
    assert last.layout == (0, 3, 1, 2)
    assert report.drift_origin is last
    assert "permuting axes [0, 3, 1, 2]" in report_markdown(report)
    # Same shape, scrambled by a flip (e.g. a square NCHW tensor read as NHWC) is found as well.
    x = np.random.default_rng(3).standard_normal((1, 6, 6, 6)).astype(np.float32)
    diff = compare_values("v", x, np.ascontiguousarray(x.transpose(0, 2, 3, 1)), Tolerance())
    assert diff.exceeds and diff.layout == (0, 3, 1, 2)


def test_metrics() -> None:
    a = np.array([1.0, 2.0, np.nan, np.inf], np.float32)
    b = np.array([1.0, 2.0 + 2.0**-22, np.nan, -np.inf], np.float32)
    d = compare_values("v", a, b, Tolerance(0, 0))
    assert d.inf_mismatch == 1 and d.nan_mismatch == 0 and d.exceeds
    assert d.max_ulp == 1
    assert ulp_distance(np.float32([0.0]), np.float32([-0.0])) == 0
    assert compare_values("v", np.int64([1, 2]), np.int64([1, 3]), Tolerance()).exceeds
    assert compare_values("v", np.float32([1]), np.float64([1]), Tolerance()).dtype_mismatch
    exact = compare_values("v", np.float32([1, 2]), np.float32([1, 2]), Tolerance(0, 0))
    assert not exact.exceeds and exact.max_abs == 0 and exact.cosine == 1.0


def test_tolerance_file(tmp_path: Path) -> None:
    path = tmp_path / "tol.toml"
    path.write_text('[default]\natol = 1e-3\nrtol = 0\n[ops.Sigmoid]\natol = 0.5\n[values."c2"]\natol = 1\nrtol = 0\n')
    table = ToleranceTable.load(path)
    assert table.for_value("Conv", "c1") == Tolerance(1e-3, 0.0)
    assert table.for_value("Sigmoid", "y").atol == 0.5
    assert table.for_value("Conv", "c2").atol == 1.0
    bad = tmp_path / "bad.toml"
    bad.write_text("[default]\natol = -1\n")
    with pytest.raises(Exception, match="non-negative"):
        ToleranceTable.load(bad)


def test_reports_are_stable_and_complete(tmp_path: Path) -> None:
    faulty = AlteredBackend("conv2", lambda y: y + np.float32(0.05))
    first = report_json(check_parity(conv_net(), FEEDS, ["reference", faulty]))
    second = report_json(check_parity(conv_net(), FEEDS, ["reference", faulty]))
    assert first == second
    data = json.loads(first)
    assert data["format"] == "sealtrace.parity.v1"
    assert data["summary"]["drift_origin"]["name"] == "conv2"
    report = check_parity(conv_net(), FEEDS, ["reference", faulty])
    md = report_markdown(report)
    assert "drift origin: #2 `conv2` (Conv)" in md and "| 2 | `conv2` | Conv | born-here |" in md
    page = report_html(report)
    assert "<svg" in page and "drift origin" in page and "<script" not in page and "http" not in page.split("<svg")[0]


def test_cli_parity_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    out = tmp_path / "r.json"
    assert main(["parity", str(model), "--random-inputs", "--report", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["passed"] is True
    assert capsys.readouterr().err == ""  # the progress bar is drawn on terminals only
    assert main(["parity", str(model), "--random-inputs", "--atol", "0", "--rtol", "0"]) in (0, 1)
    assert main(["parity", str(model), "--random-inputs", "--report", str(tmp_path / "r.txt")]) == 2
    assert main(["parity", str(model), "--random-inputs", "--backends", "reference"]) == 2
    assert main(["parity", str(model), "--random-inputs", "--report", str(out)]) == 2  # exists
    assert "exists" in capsys.readouterr().err


def test_every_report_path_is_checked_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # b.json used to be found existing only after the whole run, with a.html already written.
    import sealtrace.cli.parity as cli_parity

    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    (tmp_path / "b.json").write_text("kept")
    ran: list[bool] = []
    real = cli_parity.check_parity
    monkeypatch.setattr(cli_parity, "check_parity", lambda *a, **k: ran.append(True) or real(*a, **k))
    run = ["parity", str(model), "--random-inputs"]
    assert main([*run, "--report", str(tmp_path / "a.html"), "--report", str(tmp_path / "b.json")]) == 2
    assert "b.json" in capsys.readouterr().err
    assert main([*run, "--report", str(tmp_path / "c.md"), "--report", str(tmp_path / "." / "c.md")]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main([*run, "--report", str(tmp_path / "missing" / "r.md")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not ran and not (tmp_path / "a.html").exists() and (tmp_path / "b.json").read_text() == "kept"
    assert main([*run, "--report", str(tmp_path / "a.html"), "--report", str(tmp_path / "b.json"), "--force"]) == 0
    assert ran and json.loads((tmp_path / "b.json").read_text())["summary"]["passed"] is True


@pytest.mark.parametrize(
    ("name", "content"),
    [("t.json", b"5"), ("t.json", b"[[]]"), ("t.json", b'{"ops": 3}'), ("t.json", b"[" * 100_000),
     ("t.toml", b"\xff\xfe"), ("t.toml", b"a = " + b"[" * 100_000), ("t.toml", b"values = 1")],
)
def test_malformed_tolerance_files_are_bad_input(
    tmp_path: Path, name: str, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "net.onnx"
    onnx.save(conv_net(), model)
    (tmp_path / name).write_bytes(content)
    assert main(["parity", str(model), "--random-inputs", "--tolerance-file", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sealtrace: error:") and name in err and err.count("\n") == 1


def test_a_tolerance_file_that_is_a_device_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "t.toml").symlink_to("/dev/zero")
    with pytest.raises(InputError, match="regular file"):
        ToleranceTable.load(tmp_path / "t.toml")


def test_reports_are_written_all_or_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sealtrace.parity import report as reports

    result = check_parity(build_plan(conv_net()), {"x": np.ones((1, 3, 8, 8), np.float32)}, ["reference", "onnxruntime"])

    def broken(_report: object) -> str:
        raise RuntimeError("renderer failed")

    monkeypatch.setitem(reports._WRITERS, ".md", broken)
    with pytest.raises(RuntimeError):
        reports.write_reports([(result, tmp_path / "a.html"), (result, tmp_path / "b.md")])
    assert list(tmp_path.iterdir()) == []


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_html_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed in CI (.ci/run installs it)")
        pytest.skip("chromium not installed")
    faulty = AlteredBackend("conv2", lambda y: y + np.float32(0.05))
    page = tmp_path / "report.html"
    page.write_text(report_html(check_parity(conv_net(), FEEDS, ["reference", faulty])))
    shot = tmp_path / "shot.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    done = subprocess.run(
        [browser, *flags, f"--screenshot={shot}", "--window-size=1000,900", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert shot.is_file() and shot.stat().st_size > 5000, done.stderr[-2000:]
    console_errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    assert not console_errors, console_errors
    dom = subprocess.run(
        [browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=False
    )
    assert "drift origin" in dom.stdout and "<svg" in dom.stdout


def test_json_report_matches_its_schema() -> None:
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "src/sealtrace/schemas/parity-report.schema.json").read_text())
    faulty = AlteredBackend("conv2", lambda y: y + np.float32(0.05))
    for backends in (["reference", "onnxruntime"], ["reference", faulty]):
        jsonschema.validate(json.loads(report_json(check_parity(conv_net(), FEEDS, backends))), schema)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_metrics_equal_the_general_rule(dtype: type[np.floating[Any]]) -> None:
    # The single-pass path for finite float32/float64 values must give the general path's figures
    # bit for bit: sign flips around zero (ULP across zero), -0.0 vs +0.0, zeros in b (inf max_rel),
    # differences inside and beyond atol, and a layout flip.
    from sealtrace.parity.metrics import _compare_finite, _compare_floats_general

    rng = np.random.default_rng(7)
    base = rng.standard_normal((2, 3, 5, 5)).astype(dtype)
    cases = [
        base + dtype(1e-6) * rng.standard_normal(base.shape).astype(dtype),
        -base,
        np.where(rng.random(base.shape) < 0.3, -base, base).astype(dtype),
        np.where(base == base.flat[0], dtype(0), base).astype(dtype),
        np.ascontiguousarray(base.transpose(0, 1, 3, 2)),
        base * dtype(1.5),
    ]
    signed = base.copy()
    signed.flat[:4] = [0.0, -0.0, 1e-30, -1e-30]
    other = signed.copy()
    other.flat[:4] = [-0.0, 0.0, -1e-30, 2e-30]
    zero_b = base.copy()
    zero_b.flat[:3] = 0.0
    pairs = [(base, c) for c in cases] + [(signed, other), (base, zero_b), (zero_b, base)]
    for tol in (Tolerance(), Tolerance(0.0, 0.0), Tolerance(10.0, 0.0)):
        for a, b in pairs:
            fast = _compare_finite("v", a, b, tol)
            assert fast is not None
            assert fast == _compare_floats_general("v", a, b, tol)
            assert fast.max_ulp == ulp_distance(a, b)
    huge = np.full(4, 3e38, np.float32)
    assert _compare_finite("v", huge, -huge, Tolerance()) is None  # squares overflow: the general path decides
    assert _compare_finite("v", np.float32([1, np.nan]), np.float32([1, 2]), Tolerance()) is None


_MEMORY_PROBE = """
import sys
import numpy as np, psutil
from onnx import TensorProto, helper, numpy_helper
import sealtrace
from sealtrace import build_plan
from sealtrace.backends.onnxruntime import OnnxRuntimeBackend
from sealtrace.backends.reference import ReferenceBackend
from sealtrace.parity import check_parity
from tests.conftest import make_model

steps, shape = 160, (512, 1024)  # 160 values of 2 MiB: 320 MiB if they were all held
nodes, prev = [], "x"
for i in range(steps):
    nodes.append(helper.make_node("Mul" if i % 2 else "Add", [prev, "c"], [f"v{i}"], name=f"s{i}"))
    prev = f"v{i}"
model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                   [helper.make_tensor_value_info(prev, TensorProto.FLOAT, shape)],
                   [numpy_helper.from_array(np.float32([1.0001]), "c")])
plan = build_plan(model)
feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
before = psutil.Process().memory_info().rss
ort = OnnxRuntimeBackend(per_op=True)
report = check_parity(plan, feeds, [ReferenceBackend(), ort])
# VmHWM, not ru_maxrss: a process spawned by a big one (an xdist worker) inherits its maxrss at exec.
with open("/proc/self/status") as status:
    peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
growth = peak - before
print(len(report.steps), report.passed, growth, len(ort._segments[id(plan)].segments), sealtrace.__file__)
"""


def test_parity_memory_stays_bounded() -> None:
    # Every value of both backends held at once would be 2 x 320 MiB. Compared as the run goes,
    # with ONNX Runtime run in segments, the first run (sessions built, arena grown) stays well
    # under the size of one backend's values. Measured in a fresh process: peak RSS is per process.
    import sys

    if not Path("/proc/self/status").is_file():
        pytest.skip("peak RSS is read from /proc (Linux)")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _MEMORY_PROBE], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    steps, passed, growth, segments, where = done.stdout.split()
    assert steps == "160" and passed == "True" and int(segments) > 1
    assert int(growth) < 0.35 * 320 * 2**20, f"peak grew by {int(growth) / 2**20:.0f} MiB ({segments} segments, {where})"


def test_local_shortcut_for_identical_inputs_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # A step whose inputs are bit-identical on both sides is not re-run: the reference kernel would
    # give the reference backend's own outputs again. The report must be the one with every re-run.
    import sealtrace.parity.checker as checker

    # Outputs found bit-identical are remembered for that test (_same_bits decides both).
    from tests.test_onnxruntime_backend import long_model

    faulty = AlteredBackend("conv2", lambda y: y + np.float32(0.05))
    cases = [["reference", "onnxruntime"], ["reference", faulty]]
    long_plan = build_plan(long_model())
    long_feeds = {"x": np.random.default_rng(5).standard_normal((4, 8)).astype(np.float32)}

    def reports() -> list[str]:
        return [report_json(check_parity(conv_net(), FEEDS, backends)) for backends in cases] + [
            report_json(check_parity(long_plan, long_feeds, backends))
            for backends in (["reference", "onnxruntime"], ["reference", AlteredBackend("s7", lambda y: y * 2)])
        ]

    shortcut = reports()
    monkeypatch.setattr(checker, "_same_bits", lambda x, y: False)
    rerun = reports()
    assert shortcut == rerun
    assert json.loads(shortcut[1])["summary"]["born_here"][0]["name"] == "conv2"
    assert json.loads(shortcut[3])["summary"]["born_here"][0]["name"] == "s7"


def test_same_bits() -> None:
    from sealtrace.parity.checker import _same_bits

    x = np.float32([0.0, 1.0])
    assert _same_bits(x, x.copy()) and _same_bits(x, x)
    assert not _same_bits(x, np.float32([-0.0, 1.0]))  # equal as numbers, not as bits
    assert not _same_bits(x, x.astype(np.float64)) and not _same_bits(x, x.reshape(2, 1))
    assert not _same_bits([x], [x])  # sequences are re-run


class ScaledBackend(ReferenceBackend):
    """The reference backend on slightly scaled float inputs: differences at every step, subgraph
    steps included (both sides report them)."""

    name = "scaled"

    def run(self, plan: Plan, feeds: Mapping[str, Any], observers: Sequence[StepObserver] = ()) -> dict[str, Any]:
        scaled = {k: (v * np.float32(1.001)).astype(v.dtype) if v.dtype == np.float32 else v for k, v in feeds.items()}
        return super().run(plan, scaled, observers)


def test_subgraph_steps_are_compared_when_both_sides_report_them() -> None:
    from tests.test_onnxruntime_backend import long_model

    plan = build_plan(long_model())
    feeds = {"x": np.random.default_rng(4).standard_normal((4, 8)).astype(np.float32)}
    for backends in (["reference", ScaledBackend()], [ScaledBackend(), "reference"]):
        report = check_parity(plan, feeds, backends)
        nested = [s for s in report.steps if s.path]
        assert nested and all(s.status != "not-compared" and s.local is None for s in nested)
        assert all(s.status != "not-compared" for s in report.steps)
        assert report_json(report) == report_json(check_parity(plan, feeds, backends))


def test_tolerance_tables_are_not_mixed_up_between_runs_of_one_plan() -> None:
    # The per-step facts (tolerances included) are cached per Plan and tolerance table.
    plan = build_plan(conv_net())
    faulty = AlteredBackend("conv2", lambda y: y + np.float32(0.05))
    loose = ToleranceTable(values={"c2": Tolerance(1.0, 0.0)}, ops={"Relu": Tolerance(1.0, 0.0)})
    for _ in range(2):
        strict = check_parity(plan, FEEDS, ["reference", faulty])
        relaxed = check_parity(plan, FEEDS, ["reference", faulty], tolerance=loose)
        by_name = {s.name: s for s in strict.steps}
        relaxed_by_name = {s.name: s for s in relaxed.steps}
        assert by_name["conv2"].exceeds and not relaxed_by_name["conv2"].exceeds
        assert by_name["relu2"].exceeds and not relaxed_by_name["relu2"].exceeds
        assert relaxed_by_name["conv3"].exceeds == by_name["conv3"].exceeds
