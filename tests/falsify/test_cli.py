"""``sealtrace falsify`` and ``sealtrace falsify-bench``: answers, files, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from sealtrace.audit import verify_log
from sealtrace.cli import main
from tests.falsify.conftest import toy_network


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
    assert main(["falsify-bench", str(bad), "--json"]) == 0  # a bad instance is an error row, not a crash
    report = json.loads(capsys.readouterr().out)
    assert report["summary"]["errors"] == 1 and "never closed" in report["results"][0]["error"]
