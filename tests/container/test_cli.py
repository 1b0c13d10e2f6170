"""``sealtrace seal | verify | inspect | unseal | keygen | run`` on containers: outputs and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sealtrace.cli import main


def test_cli_story(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = str(tmp_path / "k.pem")
    seal = str(tmp_path / "t.seal")
    assert main(["keygen", "-o", key]) == 0
    assert (tmp_path / "k.pub").exists()
    assert main(["keygen", "-o", key]) == 2  # never overwrites a key
    assert main(["seal", str(tiny_onnx), "-o", seal, "--sign", key]) == 0
    assert main(["seal", str(tiny_onnx), "-o", seal]) == 2  # exists
    assert main(["seal", str(tiny_onnx), "-o", seal, "--sign", key, "--force"]) == 0
    capsys.readouterr()
    assert main(["verify", seal, "--trust", str(tmp_path / "k.pub"), "--require-signature"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["verify", seal, "--require-signature"]) == 2  # needs --trust
    assert main(["inspect", seal, "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert [t["name"] for t in described["tensors"]] == ["W", "B"]
    assert main(["inspect", seal]) == 0
    assert main(["unseal", seal, "-o", str(tmp_path / "back.onnx")]) == 0
    assert (tmp_path / "back.onnx").read_bytes() == tiny_onnx.read_bytes()
    assert main(["run", seal, "--random-inputs"]) == 0


def test_cli_tampered_container(tiny_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seal = tmp_path / "t.seal"
    assert main(["seal", str(tiny_onnx), "-o", str(seal)]) == 0
    data = bytearray(seal.read_bytes())
    data[-1] ^= 1
    bad = tmp_path / "bad.seal"
    bad.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["verify", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "tensor 'B'" in err and "expected sha256" in err
    assert main(["verify", str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and [m["name"] for m in report["mismatches"]] == ["B"]
    assert main(["run", str(bad), "--random-inputs"]) == 1  # refused before anything runs
    assert main(["unseal", str(bad), "-o", str(tmp_path / "x.onnx")]) == 1
    assert not (tmp_path / "x.onnx").exists()
    (tmp_path / "junk.seal").write_bytes(b"\x89SEAL\r\n\x1a" + b"\0" * 100)
    # It claims to be a container (the magic) and is not a valid one: a failed check (issue 14,
    # item 13; was exit 2).
    assert main(["verify", str(tmp_path / "junk.seal")]) == 1
    assert main(["inspect", str(tiny_onnx)]) == 2  # an ONNX file is not a container


# --- issue 14: exit codes that do not lie, trust that refuses, OK lines that say who signed ------


@pytest.fixture
def signed_seal(tiny_onnx: Path, tmp_path: Path) -> dict[str, Path]:
    paths = {"key": tmp_path / "k.pem", "other": tmp_path / "o.pem", "seal": tmp_path / "t.seal",
             "unsigned": tmp_path / "u.seal"}  # fmt: skip
    assert main(["keygen", "-o", str(paths["key"])]) == 0
    assert main(["keygen", "-o", str(paths["other"])]) == 0
    assert main(["seal", str(tiny_onnx), "-o", str(paths["seal"]), "--sign", str(paths["key"])]) == 0
    assert main(["seal", str(tiny_onnx), "-o", str(paths["unsigned"])]) == 0
    paths["pub"], paths["other_pub"] = tmp_path / "k.pub", tmp_path / "o.pub"
    return paths


def test_every_single_byte_flip_of_a_signed_container_exits_1(signed_seal: dict[str, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """Any byte of a file that claims to be a container and fails its check is a failed check: exit 1
    (a damaged header was exit 2; never 3). The magic's own bytes included: the name says .seal."""
    signed = signed_seal["seal"].read_bytes()
    assert len(signed) < 4096
    flipped = tmp_path / "flipped.seal"
    codes: dict[int, list[int]] = {}
    for i in range(len(signed)):
        data = bytearray(signed)
        data[i] ^= 0x01 if i % 2 else 0xFF
        flipped.write_bytes(bytes(data))
        codes.setdefault(main(["verify", str(flipped)]), []).append(i)
    capsys.readouterr()
    assert set(codes) == {1}, {code: where[:10] for code, where in codes.items()}


def test_expect_digest_that_is_not_a_digest_is_bad_usage(signed_seal: dict[str, Path]) -> None:
    assert main(["verify", str(signed_seal["seal"]), "--expect-digest", "zz"]) == 2
    assert main(["verify", str(signed_seal["seal"]), "--expect-digest", "0" * 64]) == 1  # a digest, not this one


@pytest.mark.parametrize("verb", ["verify", "run", "unseal", "replay"])
def test_trust_refuses_an_unsigned_or_otherwise_signed_container(signed_seal: dict[str, Path], tmp_path: Path,
                                                                 verb: str, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """--trust without --require-signature refuses what the trusted keys did not sign (it only
    labelled signatures before). replay's --trust covers the log too: it is signed by a third key,
    trusted in every call, so that what is refused here is the container."""
    log, log_key = tmp_path / "run.jsonl", tmp_path / "log.pem"
    assert main(["keygen", "-o", str(log_key)]) == 0
    assert main(["run", str(signed_seal["seal"]), "--random-inputs", "--audit", str(log), "--sign-log", str(log_key)]) == 0

    def call(container: Path, key: Path) -> int:
        args = {
            "verify": ["verify", str(container)],
            "run": ["run", str(container), "--random-inputs"],
            "unseal": ["unseal", str(container), "-o", str(tmp_path / "out.onnx"), "--force"],
            "replay": ["replay", str(log), "--container", str(container), "--trust", str(log_key.with_suffix(".pub"))],
        }[verb]
        return main([*args, "--trust", str(key)])

    capsys.readouterr()
    assert call(signed_seal["unsigned"], signed_seal["pub"]) == 1
    assert call(signed_seal["seal"], signed_seal["other_pub"]) == 1
    assert "trusted signature" in capsys.readouterr().err
    assert call(signed_seal["seal"], signed_seal["pub"]) == 0
    assert "signed by trusted key" in capsys.readouterr().out


@pytest.mark.parametrize("verb", ["verify", "run", "unseal", "replay"])
def test_ok_lines_say_whether_and_by_whom_the_container_is_signed(signed_seal: dict[str, Path], tmp_path: Path,
                                                                  verb: str, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from sealtrace.container import describe_container

    key_id = describe_container(signed_seal["seal"])["signatures"][0]["key_id"]
    log = tmp_path / "run.jsonl"
    assert main(["run", str(signed_seal["seal"]), "--random-inputs", "--audit", str(log)]) == 0
    for container, expected in ((signed_seal["seal"], f"signed by key {key_id} (signer not checked: give --trust"),
                                (signed_seal["unsigned"], "unsigned")):  # fmt: skip
        capsys.readouterr()
        args = {
            "verify": ["verify", str(container)],
            "run": ["run", str(container), "--random-inputs"],
            "unseal": ["unseal", str(container), "-o", str(tmp_path / "out.onnx"), "--force"],
            "replay": ["replay", str(log), "--container", str(container)],
        }[verb]
        assert main(args) == 0
        out = capsys.readouterr().out
        assert expected in out, out


def test_a_seal_name_that_is_not_a_container_is_refused(tiny_onnx: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    fake = tmp_path / "fake.seal"
    fake.write_bytes(tiny_onnx.read_bytes())
    assert main(["run", str(fake), "--random-inputs"]) == 1  # ran unverified before
    assert main(["verify", str(fake)]) == 1
    assert main(["unseal", str(fake), "-o", str(tmp_path / "x.onnx")]) == 1
    assert "not a sealtrace container" in capsys.readouterr().err
    # Without the name, an ONNX file is not a container: bad input for verify, and run says plainly
    # that what it ran was not sealed nor verified.
    assert main(["verify", str(tiny_onnx)]) == 2
    capsys.readouterr()
    assert main(["run", str(tiny_onnx), "--random-inputs"]) == 0
    assert "not sealed" in capsys.readouterr().err


def test_seal_and_verify_report_the_same_tensor_bytes(signed_seal: dict[str, Path], tiny_onnx: Path,
                                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    capsys.readouterr()
    assert main(["seal", str(tiny_onnx), "-o", str(tmp_path / "again.seal")]) == 0
    sealed = capsys.readouterr().out
    assert main(["verify", str(tmp_path / "again.seal")]) == 0
    verified = capsys.readouterr().out
    # tiny: 6 + 3 float32 = 36 bytes of tensor data; the graph section is hashed too.
    assert "36 B of tensor data" in sealed and "36 B of tensor data" in verified
    assert "hashed" in verified


def test_inspect_with_an_empty_producer(signed_seal: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["inspect", str(signed_seal["seal"])]) == 0
    out = capsys.readouterr().out
    assert " ;" not in out and "producer         -" in out


def test_a_container_truncated_while_it_is_read_is_a_failed_check(signed_seal: dict[str, Path], tmp_path: Path) -> None:
    """Truncated under an open reader: an IntegrityError, never a SIGBUS (it used to be a memory
    map). Run in a fresh process, so that a crash shows as a failure, not a lost test worker."""
    import subprocess
    import sys

    big = tmp_path / "big.onnx"
    _big_model(big)
    assert main(["seal", str(big), "-o", str(tmp_path / "big.seal")]) == 0
    code = (
        "import os, sys\n"
        "from sealtrace.container import IntegrityError, open_container, verify_container\n"
        "c = open_container(sys.argv[1])\n"
        "os.truncate(sys.argv[1], c.data_start + 4096)\n"
        "try:\n"
        "    verify_container(c)\n"
        "except IntegrityError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "big.seal")], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-500:])
    assert "refused:" in done.stdout and "truncated" in done.stdout


def _big_model(path: Path) -> None:
    """A model with 8 MiB of weights: larger than one read block."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((1024, 2048), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "big",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])], [w],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("device", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_key_is_refused_not_read_forever(signed_seal: dict[str, Path], tiny_onnx: Path, tmp_path: Path,
                                                          device: str) -> None:  # fmt: skip
    import os
    import subprocess
    import sys

    if device == "fifo":
        device = str(tmp_path / "key.pipe")
        os.mkfifo(device)
    for args in (["verify", str(signed_seal["seal"]), "--trust", device],
                 ["seal", str(tiny_onnx), "-o", str(tmp_path / "x.seal"), "--sign", device]):  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "sealtrace", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.startswith("sealtrace: error:") and "not a regular file" in done.stderr


def test_manifest_trust_refuses_an_unsigned_manifest(signed_seal: dict[str, Path], tmp_path: Path) -> None:
    """The manifests share the containers' signature check: --trust alone refuses (it labelled)."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    (directory / "weights.bin").write_bytes(b"weights")
    manifest = tmp_path / "ckpt.manifest.json"
    assert main(["manifest", "create", str(directory), "-o", str(manifest)]) == 0
    assert main(["manifest", "verify", str(directory), str(manifest), "--trust", str(signed_seal["pub"])]) == 1
    signed = tmp_path / "signed.manifest.json"
    assert main(["manifest", "create", str(directory), "-o", str(signed), "--sign", str(signed_seal["key"])]) == 0
    assert main(["manifest", "verify", str(directory), str(signed), "--trust", str(signed_seal["pub"])]) == 0
    assert main(["manifest", "verify", str(directory), str(signed), "--trust", str(signed_seal["other_pub"])]) == 1


def test_verify_imports_only_what_verifying_needs(signed_seal: dict[str, Path]) -> None:
    """Regression (issue 16): `sealtrace verify` imported every verb's modules, the Plan builder and
    its kernels included: half of its 0.8 s on a 1 GB container was start-up."""
    heavy = ["sealtrace.plan", "sealtrace.ops", "sealtrace.session", "sealtrace.parity", "sealtrace.audit",
             "sealtrace.backends", "onnxruntime", "torch", "rich", "ray", "fastapi", "scipy"]  # fmt: skip
    script = (
        "import sys\nfrom sealtrace.cli import main\n"
        f"assert main(['verify', {str(signed_seal['seal'])!r}]) == 0\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]", f"imported by verify: {done.stdout}"
