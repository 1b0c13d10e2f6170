"""``sealtrace falsify`` and ``sealtrace falsify-bench``: answers, files, exit codes, one-line errors."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace.audit import verify_log
from sealtrace.cli import main
from tests.falsify.conftest import (
    VIOLATED,
    stand_in_network,
    toy_network,
    two_input_network,
    write_box_property,
)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEALTRACE_CACHE_DIR", str(tmp_path / "cache"))


def test_falsify_sat_writes_result_violation_and_audit(
    toy_file: Path, violated_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result, cex, log = tmp_path / "out.txt", tmp_path / "cex.npy", tmp_path / "log.jsonl"
    code = main(["falsify", str(toy_file), str(violated_file), "--timeout", "30", "--seed", "3",
                 "--result", str(result), "--save-violation", str(cex), "--audit", str(log)])
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.splitlines()[0] == "sat"
    assert "-Y_1 + 0.75 <= 0" in printed and "audit run digest" in printed
    text = result.read_text()
    assert text.startswith("sat\n((X_0 ") and "(Y_1 " in text and text.endswith("))\n")
    x = np.load(cex)
    assert x.shape == (1, 2) and x.dtype == np.float32
    assert verify_log(log, inputs={"x": x}).ok
    # The log is not overwritten without --force.
    assert main(["falsify", str(toy_file), str(violated_file), "--audit", str(log)]) == 2
    assert "file exists" in capsys.readouterr().err


def test_falsify_unknown_and_json(toy_file: Path, safe_file: Path, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "out.txt"
    assert main(["falsify", str(toy_file), str(safe_file), "--starts", "64", "--result", str(result)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "unknown"
    assert result.read_text() == "unknown\n"
    assert main(["falsify", str(toy_file), str(safe_file), "--starts", "64", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "unknown" and report["search"]["stopped_by"] == "starts"
    assert report["counterexample"] is None


def test_falsify_on_a_sealed_container(tmp_path: Path, violated_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sealtrace.container import seal_model

    sealed = tmp_path / "toy.seal"
    seal_model(toy_network(), sealed)
    assert main(["falsify", str(sealed), str(violated_file), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "sat" and report["container"] == str(sealed)
    assert report["counterexample"]["constraints"][0]["holds"] is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(declare-const X_0 Real)\n(assert (<= X_0 (* X_0 X_0)))\n", "bad.vnnlib:2:17: (* ...) multiplies two variables"),
        ("(declare-const X_0 Real)\n(assert (<= X_0 1)\n", "bad.vnnlib:2:1: '(' is never closed"),
    ],
)
def test_bad_property_is_one_line_exit_2(toy_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         text: str, expected: str) -> None:
    bad = tmp_path / "bad.vnnlib"
    bad.write_text(text)
    assert main(["falsify", str(toy_file), str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert err.startswith("sealtrace: error: ") and expected in err


def test_bad_inputs_exit_2(toy_file: Path, violated_file: Path, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["falsify", str(tmp_path / "absent.onnx"), str(violated_file)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["falsify", str(toy_file), str(tmp_path / "absent.vnnlib")]) == 2
    assert "cannot read the property file" in capsys.readouterr().err
    assert main(["falsify", str(toy_file), str(violated_file), "--save-violation", str(tmp_path / "x.txt")]) == 2
    assert "must end in .npy" in capsys.readouterr().err
    three = tmp_path / "three.vnnlib"
    three.write_text(violated_file.read_text().replace("(declare-const X_1 Real)",
                                                       "(declare-const X_1 Real)(declare-const X_2 Real)")
                     + "(assert (>= X_2 0))(assert (<= X_2 1))")
    assert main(["falsify", str(toy_file), str(three)]) == 2
    assert "declares 3 inputs" in capsys.readouterr().err


def test_falsify_bench_table_and_files(toy_file: Path, violated_file: Path, safe_file: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    instances = tmp_path / "instances.csv"
    instances.write_text(f"{toy_file.name},{violated_file.name},30,sat\n{toy_file.name},{safe_file.name},1,unsat\n")
    md, csv_out = tmp_path / "r.md", tmp_path / "r.csv"
    assert main(["falsify-bench", str(instances), "--timeout", "1", "--out", str(md), "--out", str(csv_out)]) == 0
    printed = capsys.readouterr().out
    assert "toy violated" in printed and "toy safe" in printed
    assert "sat 1 of 1 expected, certified 1, wrong 0" in md.read_text()
    rows = csv_out.read_text().splitlines()
    assert rows[0].startswith("instance,network,property,result") and len(rows) == 3
    assert ",sat," in rows[1] and ",yes," in rows[1] and ",unknown," in rows[2]


def test_falsify_bench_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "instances.csv"
    bad.write_text("a.onnx,b.vnnlib\n")
    assert main(["falsify-bench", str(bad)]) == 2
    assert "expected network,property,timeout" in capsys.readouterr().err
    onnx.save(toy_network(), tmp_path / "toy.onnx")
    (tmp_path / "p.vnnlib").write_text("(declare-const X_0 Real")
    bad.write_text("toy.onnx,p.vnnlib,5\n")
    # A bad instance is an error row, not a crash; and as every instance errored on bad input, nothing
    # ran: exit 2 (this asserted exit 0 before: a benchmark that ran nothing passed).
    assert main(["falsify-bench", str(bad), "--json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["summary"]["errors"] == 1 and "never closed" in report["results"][0]["error"]
    assert captured.err.startswith("sealtrace: error: no instance ran: all 1 errored; first: toy p: ")


@pytest.fixture
def without_torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`import torch` fails as it does without the torch extra; modules imported meanwhile are dropped after."""
    before = set(sys.modules)
    monkeypatch.setitem(sys.modules, "torch", None)  # type: ignore[arg-type]
    for name in [n for n in sys.modules if n.startswith(("sealtrace.falsify", "sealtrace.torchbridge", "sealtrace.torchops", "torch."))]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.mark.parametrize("verb", ["falsify", "falsify-bench"])
def test_without_torch_the_falsify_verbs_say_what_to_install(
    verb: str, toy_file: Path, violated_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    without_torch: None,
) -> None:
    instances = tmp_path / "instances.csv"
    instances.write_text(f"{toy_file.name},{violated_file.name},5\n")
    args = [str(toy_file), str(violated_file)] if verb == "falsify" else [str(instances)]
    assert main([verb, *args]) == 2  # was exit 3: ModuleNotFoundError
    err = capsys.readouterr().err
    assert err == f"sealtrace: error: {verb} needs PyTorch (the search runs on a torch module): pip install 'sealtrace[torch]'\n"


@pytest.mark.parametrize("option", ["--result", "--save-violation", "--audit"])
def test_falsify_outputs_are_checked_before_the_search(
    option: str, toy_file: Path, violated_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sealtrace.falsify

    def no_search(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the search ran before the outputs were checked")

    monkeypatch.setattr(sealtrace.falsify, "falsify", no_search)
    name = {"--result": "out.txt", "--save-violation": "cex.npy", "--audit": "log.jsonl"}[option]
    missing = tmp_path / "no-such-dir" / name
    assert main(["falsify", str(toy_file), str(violated_file), option, str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"sealtrace: error: {option} {missing}: directory {missing.parent} does not exist\n"
    existing = tmp_path / name
    existing.write_text("the user's file")
    assert main(["falsify", str(toy_file), str(violated_file), option, str(existing)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: {option} {existing}: file exists (use --force to overwrite)\n"
    assert existing.read_text() == "the user's file"


def test_falsify_outputs_must_be_distinct(toy_file: Path, violated_file: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    same = tmp_path / "same.npy"
    assert main(["falsify", str(toy_file), str(violated_file), "--result", str(same),
                 "--save-violation", str(same)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: --save-violation {same}: the same file as --result\n"


def test_force_keeps_an_existing_audit_log_when_no_counterexample_replaces_it(
    toy_file: Path, safe_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log, result = tmp_path / "log.jsonl", tmp_path / "result.txt"
    log.write_text("an earlier log\n")
    result.write_text("an earlier result\n")
    assert main(["falsify", str(toy_file), str(safe_file), "--starts", "8", "--audit", str(log),
                 "--result", str(result), "--force"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "unknown"
    assert log.read_text() == "an earlier log\n"  # was deleted before the search began
    assert result.read_text() == "unknown\n"  # replaced, as --force asked


def test_falsify_replaces_an_audit_log_with_force(toy_file: Path, violated_file: Path, tmp_path: Path) -> None:
    log = tmp_path / "log.jsonl"
    log.write_text("an earlier log\n")
    assert main(["falsify", str(toy_file), str(violated_file), "--audit", str(log), "--force"]) == 0
    assert verify_log(log).ok


def _instances(tmp_path: Path, rows: list[str]) -> Path:
    path = tmp_path / "instances.csv"
    path.write_text("".join(row + "\n" for row in rows))
    return path


def test_falsify_bench_with_some_errors_exits_1_and_shows_them(
    toy_file: Path, violated_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken.vnnlib").write_text("(declare-const X_0 Real")
    instances = _instances(tmp_path, [f"toy.onnx,{violated_file.name},30", "toy.onnx,broken.vnnlib,5"])
    md, csv_out = tmp_path / "r.md", tmp_path / "r.csv"
    code = main(["falsify-bench", str(instances), "--out", str(md), "--out", str(csv_out)])
    captured = capsys.readouterr()
    assert code == 1  # was 0: an instance that errored is not a pass
    assert captured.err.startswith("sealtrace: error: 1 of 2 instance(s) errored; first: toy broken: ")
    assert captured.err.count("\n") == 1
    assert "ERRORS 1 (not run: see the error column)" in " ".join(captured.out.split())
    text = md.read_text()
    assert "ERRORS 1" in text and "| error |" in text and "never closed" in text
    assert "never closed" in csv_out.read_text()  # files are still written


def test_falsify_bench_outputs_are_checked_before_any_instance_runs(
    toy_file: Path, violated_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    instances = _instances(tmp_path, [f"toy.onnx,{violated_file.name},30"])
    missing = tmp_path / "nowhere" / "r.md"
    assert main(["falsify-bench", str(instances), "--out", str(missing)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: --out 1 {missing}: directory {missing.parent} does not exist\n"
    existing = tmp_path / "r.csv"
    existing.write_text("mine\n")
    assert main(["falsify-bench", str(instances), "--out", str(existing)]) == 2
    assert "file exists (use --force to overwrite)" in capsys.readouterr().err
    assert existing.read_text() == "mine\n"
    assert main(["falsify-bench", str(instances), "--out", str(existing), "--force"]) == 0
    assert existing.read_text().startswith("instance,network,property,result")


@pytest.mark.parametrize("kind", ["dev-zero", "directory", "too-large"])
def test_property_and_instances_files_are_read_bounded(
    kind: str, toy_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sealtrace.limits

    monkeypatch.setattr(sealtrace.limits, "_override", None)  # --memory-budget below outlives main()
    if kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "directory":
        path = tmp_path / "adir"
        path.mkdir()
    else:
        path = tmp_path / "large.txt"
        path.write_text(" " * (2 << 20))
    budget = ["--memory-budget", "16MiB"]  # 1/16 of it: 1 MiB of text
    assert main(["falsify", str(toy_file), str(path), *budget]) == 2  # /dev/zero: read forever before
    err = capsys.readouterr().err
    assert err.startswith(f"sealtrace: error: {path}: cannot read the property file (") and err.count("\n") == 1
    assert main(["falsify-bench", str(path), *budget]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sealtrace: error: {path}: ") and err.count("\n") == 1
    if kind == "too-large":
        assert "2 MiB, more than a VNN-COMP instances file may be (1 MiB, 1/16 of the memory budget" in err


@pytest.mark.parametrize("network", ["/dev/zero", "adir"])
def test_falsify_bench_refuses_a_network_that_is_not_a_file(
    network: str, violated_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "adir").mkdir()
    instances = _instances(tmp_path, [f"{network},{violated_file.name},5"])
    assert main(["falsify-bench", str(instances), "--json"]) == 2  # /dev/zero was read forever
    report = json.loads(capsys.readouterr().out)
    assert "not a model" in report["results"][0]["error"]


def test_fix_pins_a_named_input_and_the_others_are_searched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "two.onnx"
    onnx.save(two_input_network(), model)
    shift = tmp_path / "shift.npy"
    np.save(shift, np.array([[1.25]], np.float32))
    prop = tmp_path / "p.vnnlib"
    prop.write_text(VIOLATED.replace("(assert (>= Y_1 0.75))", "(assert (>= Y_0 2.1))"))  # y0 = x0 + shift
    cex = tmp_path / "cex.npz"
    assert main(["falsify", str(model), str(prop), "--fix", f"shift={shift}", "--counterexample", str(cex)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "sat"
    with np.load(cex) as saved:
        assert float(saved["shift"][0, 0]) == 1.25 and saved["x"].shape == (1, 2)
    # Wrong name, shape or dtype: one line, exit 2.
    np.save(tmp_path / "wide.npy", np.zeros((1, 2), np.float32))
    np.save(tmp_path / "double.npy", np.zeros((1, 1), np.float64))
    for fix, message in ((f"nope={shift}", "unknown input(s) 'nope'"),
                         (f"shift={tmp_path / 'wide.npy'}", "has shape [1, 1]; the fixed value given has [1, 2]"),
                         (f"shift={tmp_path / 'double.npy'}", "is float32; the fixed value given is float64"),
                         ("shift", "expected NAME=VALUE")):
        assert main(["falsify", str(model), str(prop), "--fix", fix]) == 2
        assert message in capsys.readouterr().err


def test_an_input_pinned_between_equal_decimals_says_why_there_is_no_answer(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "two.onnx"
    onnx.save(two_input_network(), model)
    prop = tmp_path / "p.vnnlib"
    prop.write_text(VIOLATED.replace("(declare-const Y_0", "(declare-const X_2 Real)\n(declare-const Y_0")
                    + "(assert (>= X_2 0.1))\n(assert (<= X_2 0.1))\n")
    assert main(["falsify", str(model), str(prop)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "unknown" and "stopped by no-region" in out
    assert ("why: region 0: no float32 point inside the box (X_2 is pinned to 0.1, and no float32 lies there: the "
            "nearest are 0.0999999940395355224609375 and 0.100000001490116119384765625") in out
    assert "--fix NAME=FILE.npy" in out


def _stand_in(tmp_path: Path, n_inputs: int, unsafe: str) -> tuple[Path, Path]:
    model, prop = tmp_path / "stand_in.onnx", tmp_path / "stand_in.vnnlib"
    onnx.save(stand_in_network(n_inputs), model)
    write_box_property(prop, np.zeros(n_inputs), np.ones(n_inputs), 8, unsafe)
    return model, prop


def _stand_in_peak(n_inputs: int) -> float:
    """plan[0] at x = 1 (its largest value in the box), in float64."""
    graph = stand_in_network(n_inputs).graph
    w1, w2 = (onnx.numpy_helper.to_array(t).astype(np.float64) for t in graph.initializer[:2])
    return float((np.maximum(np.ones(n_inputs) @ w1, 0) @ w2)[0])


STAND_IN_INPUTS = 30_000


def test_full_size_stand_in_sat_is_certified_and_summarized(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    peak = _stand_in_peak(STAND_IN_INPUTS)
    model, prop = _stand_in(tmp_path, STAND_IN_INPUTS, f"(>= Y_0 {0.6 * peak!r})")
    cex, result = tmp_path / "cex.npz", tmp_path / "result.txt"
    assert main(["falsify", str(model), str(prop), "--timeout", "60", "--counterexample", str(cex),
                 "--result", str(result)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "sat" and len(lines) < 20, out[:2000]
    assert "30,000 input values (X), 8 output values (Y); model inputs x [1, 30000]" in out
    assert f"wrote the counterexample (every model input, by name) to {cex}" in out
    with np.load(cex) as saved:
        x = saved["x"]
    assert x.shape == (1, STAND_IN_INPUTS) and x.dtype == np.float32 and x.min() >= 0 and x.max() <= 1
    assert result.read_text().count("(X_") == STAND_IN_INPUTS
    # Never overwritten without --force.
    assert main(["falsify", str(model), str(prop), "--counterexample", str(cex)]) == 2
    assert "file exists" in capsys.readouterr().err


def test_full_size_stand_in_unreachable_is_unknown_at_the_timeout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, prop = _stand_in(tmp_path, STAND_IN_INPUTS, f"(>= Y_0 {2 * _stand_in_peak(STAND_IN_INPUTS)!r})")
    started = time.perf_counter()
    assert main(["falsify", str(model), str(prop), "--timeout", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "unknown" and report["search"]["stopped_by"] == "timeout"
    assert report["search"]["samples"] > 0
    assert time.perf_counter() - started < 15
    # The timeout covers reading the property too: a budget spent while reading it is an unknown answer.
    assert main(["falsify", str(model), str(prop), "--timeout", "0.01"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "unknown"
    assert "stopped by timeout" in out and "why: the time ran out while reading the property (" in out


def test_falsify_bench_time_limit_covers_reading_the_property(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, prop = _stand_in(tmp_path, STAND_IN_INPUTS, "(>= Y_0 1e9)")
    (tmp_path / "instances.csv").write_text(f"{model.name},{prop.name},0.01\n")
    assert main(["falsify-bench", str(tmp_path / "instances.csv"), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["results"]
    assert row["result"] == "unknown" and row["error"] in (None, "")
    assert float(row["time_s"]) < 2  # stopped within a chunk of the property (reading all of it took seconds)
