"""The audit verbs: exit 0 on success, 1 naming the first bad record, 2 on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sealtrace.audit import audited_run
from sealtrace.cli import main
from sealtrace.container import seal_model
from sealtrace.signing import generate_keypair
from tests.audit.conftest import MLP_INPUT


def test_run_verify_show_replay(mlp_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sealed = tmp_path / "mlp.seal"
    seal_model(mlp_path, sealed)
    private, public = generate_keypair(tmp_path / "k.pem")
    np.save(tmp_path / "x.npy", MLP_INPUT["x"])
    log, cap = tmp_path / "log.jsonl", tmp_path / "cap"
    x = f"x={tmp_path / 'x.npy'}"
    args = ["run", str(sealed), "--input", x, "--audit", str(log), "--sample", "3", "--sign-log", str(private)]
    assert main([*args, "--capture", str(cap)]) == 0
    assert "run digest" in capsys.readouterr().out
    assert (cap / "index.json").exists()
    # An existing log is refused unless --force.
    assert main(args) == 2
    assert "exists" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    capsys.readouterr()

    assert main(["audit", "verify", str(log), "--container", str(sealed), "--input", x, "--trust", str(public)]) == 0
    out = capsys.readouterr().out
    assert "verified" in out and "signature valid" in out
    assert main(["audit", "show", str(log)]) == 0
    out = capsys.readouterr().out
    assert "MatMul" in out and "chain intact" in out
    assert main(["replay", str(log), "--container", str(sealed), "--input", x]) == 0
    assert "bit-identical" in capsys.readouterr().out

    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join([lines[0], lines[2], lines[1], *lines[3:]]))
    assert main(["audit", "verify", str(log)]) == 1
    err = capsys.readouterr().err
    assert "line 2" in err and "out of order" in err and err.count("\n") == 1
    assert main(["replay", str(log), "--container", str(sealed)]) == 1


def test_verify_usage_errors_exit_2(mlp_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "verify", str(tmp_path / "absent.jsonl")]) == 2
    assert main(["audit", "verify", str(mlp_log), "--input", "x"]) == 2
    assert main(["replay", str(mlp_log)]) == 2
    assert main(["run", "m.onnx", "--sample", "3"]) == 2
    capsys.readouterr()


def test_wrong_input_exits_1(mlp_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", MLP_INPUT["x"] * 2)
    assert main(["audit", "verify", str(mlp_log), "--input", f"x={tmp_path / 'x.npy'}"]) == 1
    assert "input 'x'" in capsys.readouterr().err


def test_show_on_a_damaged_log_shows_the_verified_prefix(mlp_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = mlp_log.read_bytes().splitlines(keepends=True)
    mlp_log.write_bytes(b"".join([*lines[:3], b'{"type":"step","foo":1}\n', b"garbage\n"]))
    # A log that does not verify is a failed check, even where its verified part is shown (exit 0 before).
    assert main(["audit", "show", str(mlp_log)]) == 1
    captured = capsys.readouterr()
    assert "NOT VERIFIED: line 4" in captured.out and "MatMul" in captured.out and "Add" in captured.out
    assert captured.err.startswith("sealtrace: error:") and "line 4" in captured.err
    assert captured.err.count("\n") == 1


def test_show_of_a_consistent_chain_with_a_false_footer_exits_1(
    mlp_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Re-chained by hand: every digest is right, but the footer counts steps the log does not have.
    import json

    from sealtrace.audit.records import seal_record

    records = [json.loads(line) for line in mlp_log.read_bytes().splitlines()]
    records[-1]["steps"] = 7
    lines, prev = [], "0" * 64
    for seq, record in enumerate(records):
        lines.append(seal_record(record, seq, prev) + b"\n")
        prev = record["chain_head" if record["type"] == "footer" else "digest"]
    mlp_log.write_bytes(b"".join(lines))
    assert main(["audit", "show", str(mlp_log)]) == 1
    captured = capsys.readouterr()
    assert "chain intact, but" in captured.out and "footer counts 7 steps" in captured.err


@pytest.mark.parametrize("verb", [["audit", "verify"], ["audit", "show"], ["diff"], ["replay"]])
def test_a_deeply_nested_line_is_a_failed_check_in_every_verb(
    mlp_path: Path, mlp_log: Path, verb: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    lines = mlp_log.read_bytes().splitlines(keepends=True)
    mlp_log.write_bytes(b"".join([*lines[:2], b'{"type":"step","x":' + b"[" * 100_000 + b"\n", *lines[3:]]))
    args = {"diff": [str(mlp_log), str(mlp_log)], "replay": [str(mlp_log), "--container", str(mlp_path)]}
    assert main([*verb, *args.get(verb[0], [str(mlp_log)])]) == 1  # exit 3 (RecursionError) before
    err = capsys.readouterr().err
    assert "line 3" in err and "internal error" not in err and err.count("\n") == 1


@pytest.mark.parametrize("special", ["fifo", "device"])
def test_a_log_that_is_not_a_regular_file_is_refused_unread(
    tmp_path: Path, special: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    log = tmp_path / "log.jsonl"
    if special == "fifo":
        os.mkfifo(log)  # no writer: a plain open and read would wait forever
    else:
        log.symlink_to("/dev/zero")  # a read without end
    for verb in (["audit", "verify"], ["audit", "show"]):
        assert main([*verb, str(log)]) == 2
        assert "regular file" in capsys.readouterr().err


def test_show_fits_80_120_and_200_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Names as long as real exporters make them: the table used to squeeze them into columns of letters.
    from onnx import TensorProto, helper

    from sealtrace.audit.log import read_records
    from sealtrace.audit.show import step_rows
    from sealtrace.session import Session
    from tests.conftest import make_model

    names = ["/features/features.0/features.0.0/Conv", "/features/features.0/features.0.1/BatchNormalization",
             "/features/features.0/features.0.2/HardSwish"]
    ops = ["Relu", "Sigmoid", "HardSwish"]
    values = ["x", *(f"p2o.pd_op.{op.lower()}.0.0" for op in ops)]
    nodes = [helper.make_node(op, [values[i]], [values[i + 1]], name=names[i]) for i, op in enumerate(ops)]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 112, 112])],
                       [helper.make_tensor_value_info(values[-1], TensorProto.FLOAT, [1, 16, 112, 112])])
    log = tmp_path / "run.jsonl"
    x = np.random.default_rng(0).standard_normal((1, 16, 112, 112)).astype(np.float32)
    audited_run(Session(model), {"x": x}, audit=log)
    rows = step_rows(read_records(log))
    for width in (80, 120, 200):
        monkeypatch.setenv("COLUMNS", str(width))
        assert main(["audit", "show", str(log)]) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert all(len(line.rstrip()) <= width for line in lines), width
        for row in rows:  # each name, shape and digest whole on one line: no column squeezed below it
            for cell in (row.step, row.op_type, row.output, row.shape, row.digest, row.stats):
                assert any(cell in line for line in lines), (width, cell)
    assert "┃ line" in out  # at 200 columns the whole table fits


def test_names_that_look_like_markup_are_printed_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # rich read '[/a]' in a step name as a closing tag: a MarkupError, exit 3, in show, parity and diff.
    import onnx
    from onnx import TensorProto, helper

    from tests.conftest import make_model

    nodes = [helper.make_node("Relu", ["x"], ["h[/b]"], name="[/a]"),
             helper.make_node("Neg", ["h[/b]"], ["y"], name="[bold]neg")]
    model = make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    onnx.save(model, tmp_path / "m.onnx")
    for name, x in (("a", [1, -2, 3]), ("b", [1, -2, 4])):
        np.save(tmp_path / f"{name}.npy", np.array(x, np.float32))
        assert main(["run", str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / f'{name}.npy'}",
                     "--audit", str(tmp_path / f"{name}.jsonl"), "--capture", str(tmp_path / f"cap_{name}")]) == 0
    capsys.readouterr()
    assert main(["audit", "show", str(tmp_path / "a.jsonl")]) == 0
    assert "[/a]" in capsys.readouterr().out
    assert main(["parity", str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'a.npy'}", "--atol", "0"]) == 0
    assert "[bold]neg" in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "cap_a"), str(tmp_path / "cap_b")]) == 1
    captured = capsys.readouterr()
    assert "h[/b]" in captured.out and "internal error" not in captured.err


def test_trust_covers_the_log_in_replay_and_takes_several_keys(
    mlp_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--trust means "refuse anything not signed by these keys": in replay the log as well as the model."""
    model_key, model_pub = generate_keypair(tmp_path / "model.pem")
    log_key, log_pub = generate_keypair(tmp_path / "log.pem")
    _, stranger_pub = generate_keypair(tmp_path / "stranger.pem")
    sealed = tmp_path / "mlp.seal"
    seal_model(mlp_path, sealed, sign_with=model_key)
    np.save(tmp_path / "x.npy", MLP_INPUT["x"])
    x = f"x={tmp_path / 'x.npy'}"
    signed, unsigned = tmp_path / "signed.jsonl", tmp_path / "unsigned.jsonl"
    assert main(["run", str(sealed), "--input", x, "--audit", str(signed), "--sign-log", str(log_key)]) == 0
    assert main(["run", str(sealed), "--input", x, "--audit", str(unsigned)]) == 0
    capsys.readouterr()

    replay = ["replay", "--container", str(sealed), "--input", x, "--trust", str(model_pub)]
    assert main([*replay, str(unsigned)]) == 1
    assert "not signed, but a trusted key was given" in capsys.readouterr().err
    assert main([*replay, str(signed)]) == 1  # signed, but by a key not given
    assert "not valid for the trusted key" in capsys.readouterr().err
    assert main([*replay, "--trust", str(log_pub), str(signed)]) == 0
    assert "bit-identical" in capsys.readouterr().out
    assert main(["replay", str(unsigned), "--container", str(sealed), "--input", x]) == 0  # no --trust: no demand

    verify = ["audit", "verify", str(signed), "--trust", str(stranger_pub)]
    assert main(verify) == 1
    assert "any of the" not in capsys.readouterr().err
    assert main([*verify, "--trust", str(log_pub)]) == 0
    assert main(["audit", "verify", str(signed), "--trust", str(stranger_pub), "--trust", str(model_pub)]) == 1
    assert "not valid for any of the 2 trusted keys" in capsys.readouterr().err


def test_show_does_not_vouch_for_the_key_id_a_signature_claims(
    mlp_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The footer's key id is outside the chain; show takes no key, so an edited key id (found by the
    fuzz long run) must not read as "signed by key X"."""
    private, _ = generate_keypair(tmp_path / "k.pem")
    np.save(tmp_path / "x.npy", MLP_INPUT["x"])
    log = tmp_path / "log.jsonl"
    assert main(["run", str(mlp_path), "--input", f"x={tmp_path / 'x.npy'}", "--audit", str(log),
                 "--sign-log", str(private)]) == 0  # fmt: skip
    text = log.read_text()
    key_id = json.loads(text.splitlines()[-1])["signature"]["key_id"]
    forged = "0" * 16 if key_id != "0" * 16 else "1" * 16
    log.write_text(text.replace(key_id, forged))
    capsys.readouterr()
    assert main(["audit", "show", str(log)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines at the terminal's width
    assert f"signature claims key {forged}, not checked" in out
    assert "signed by key" not in out
    assert main(["audit", "verify", str(log), "--trust", str(tmp_path / "k.pub")]) == 1
