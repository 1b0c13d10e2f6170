"""Every verb, every file it reads or writes, given badly: exit 2 and one line on stderr.

Each file a verb reads is given as a missing file, a directory, an empty file and /dev/zero; each
file it writes is given as an existing file (without --force), a directory, a path in a missing
directory and /dev/zero. The outcome must be exit 2 with one ``sealtrace: error:`` line, never a
traceback, a hang, a usage screen or a changed file. The table below must name every verb the CLI
has: a new verb fails ``test_the_table_names_every_verb`` until its files are listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
import numpy as np
import onnx
import pytest

from sealtrace.cli import _load_commands, app, main
from tests.container.conftest import tiny_model
from tests.falsify.conftest import VIOLATED, toy_network

Argv = Callable[[Path, str], list[str]]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One of each thing the verbs read, all valid, made by sealtrace itself."""
    w = tmp_path_factory.mktemp("verbs")
    onnx.save(tiny_model(), w / "m.onnx")
    onnx.save(toy_network(), w / "toy.onnx")
    (w / "p.vnnlib").write_text(VIOLATED)
    (w / "instances.csv").write_text("toy.onnx,p.vnnlib,1\n")
    np.save(w / "x.npy", np.ones((1, 2), np.float32))
    np.savez(w / "x.npz", x=np.ones((1, 2), np.float32))
    (w / "ckpt").mkdir()
    (w / "ckpt" / "a.npy").write_bytes((w / "x.npy").read_bytes())
    (w / "adir").mkdir()
    (w / "reqs").mkdir()
    np.savez(w / "reqs" / "a.npz", x=np.ones((1, 2), np.float32))
    (w / "empty").write_bytes(b"")
    (w / "exists.txt").write_text("mine\n")
    for argv in (
        ["keygen", "-o", str(w / "k.pem")],
        ["seal", str(w / "m.onnx"), "-o", str(w / "m.seal"), "--sign", str(w / "k.pem")],
        ["run", str(w / "m.seal"), "--input", f"x={w / 'x.npy'}", "--audit", str(w / "run.jsonl"),
         "--capture", str(w / "cap")],
        ["compile", str(w / "m.seal"), "--level", "basic", "-o", str(w / "m.opt.onnx")],
        ["manifest", "create", str(w / "ckpt"), "-o", str(w / "ckpt.json")],
        ["keygen", "--algorithm", "ecdsa-p256", "-o", str(w / "ec.pem")],
        ["manifest", "sign", str(w / "ckpt"), "--key", str(w / "ec.pem"), "-o", str(w / "ckpt.sig")],
        ["audit", "attest", str(w / "run.jsonl"), "--key", str(w / "ec.pem"), "-o", str(w / "run.intoto.json")],
    ):
        assert main(argv) == 0, argv
    _make_ledger(w)
    return w


def _make_ledger(w: Path) -> None:
    """A ledger of one signed record."""
    from sealtrace.ledger import Ledger, new_record

    ledger = Ledger.open(str(w / "ledger.db"), signer=str(w / "k.pem"))
    try:
        ledger.append(new_record(model_name="m", plan_digest="0" * 64, container_digest="1" * 64,
                                 backend="reference", backend_version="0", inputs={}, outputs={},
                                 principal="test", audit="io"))
    finally:
        ledger.close()


def _record_id(w: Path) -> str:
    from sealtrace.ledger import Ledger

    ledger = Ledger.open(str(w / "ledger.db"), readonly=True)
    try:
        return str(next(ledger.records(0, 1))[1]["id"])
    finally:
        ledger.close()


M, SEAL, LOG, KEY, PUB = "m.onnx", "m.seal", "run.jsonl", "k.pem", "k.pub"


def p(w: Path, name: str) -> str:
    return str(w / name)


# verb -> {what is read: argv with the bad path in that place}
READS: dict[str, dict[str, Argv]] = {
    "run": {
        "MODEL": lambda w, b: ["run", b, "--random-inputs"],
        "--input": lambda w, b: ["run", p(w, M), "--input", f"x={b}"],
        "--inputs": lambda w, b: ["run", p(w, M), "--inputs", b],
        "--trust": lambda w, b: ["run", p(w, SEAL), "--random-inputs", "--trust", b],
        "--container": lambda w, b: ["run", p(w, "m.opt.onnx"), "--random-inputs", "--container", b],
        "--sign-log": lambda w, b: ["run", p(w, M), "--random-inputs", "--audit", p(w, "new.jsonl"), "--sign-log", b],
    },
    "conformance": {},
    "keygen": {},
    "seal": {
        "MODEL": lambda w, b: ["seal", b, "-o", p(w, "new.seal")],
        "--sign": lambda w, b: ["seal", p(w, M), "-o", p(w, "new.seal"), "--sign", b],
    },
    "sign": {
        "CONTAINER": lambda w, b: ["sign", b, "--key", p(w, KEY), "-o", p(w, "new.seal")],
        "--key": lambda w, b: ["sign", p(w, SEAL), "--key", b, "-o", p(w, "new.seal")],
    },
    "verify": {
        "CONTAINER": lambda w, b: ["verify", b],
        "--trust": lambda w, b: ["verify", p(w, SEAL), "--trust", b],
    },
    "inspect": {
        "CONTAINER": lambda w, b: ["inspect", b],
        "CONTAINER (--cyclonedx)": lambda w, b: ["inspect", b, "--cyclonedx"],
        "--artifact": lambda w, b: ["inspect", p(w, SEAL), "--cyclonedx", "--artifact", b],
        "--trust": lambda w, b: ["inspect", p(w, SEAL), "--cyclonedx", "--trust", b],
    },
    "unseal": {
        "CONTAINER": lambda w, b: ["unseal", b, "-o", p(w, "new.onnx")],
        "--trust": lambda w, b: ["unseal", p(w, SEAL), "-o", p(w, "new.onnx"), "--trust", b],
    },
    "manifest create": {
        "DIRECTORY/": lambda w, b: ["manifest", "create", b, "-o", p(w, "new.json")],
        "--sign": lambda w, b: ["manifest", "create", p(w, "ckpt"), "-o", p(w, "new.json"), "--sign", b],
    },
    "manifest verify": {
        "DIRECTORY/": lambda w, b: ["manifest", "verify", b, p(w, "ckpt.json")],
        "MANIFEST": lambda w, b: ["manifest", "verify", p(w, "ckpt"), b],
        "--trust": lambda w, b: ["manifest", "verify", p(w, "ckpt"), p(w, "ckpt.json"), "--trust", b],
        "--trust (bundle)": lambda w, b: ["manifest", "verify", p(w, "ckpt"), p(w, "ckpt.sig"), "--trust", b],
    },
    "manifest sign": {
        "DIRECTORY/": lambda w, b: ["manifest", "sign", b, "--key", p(w, "ec.pem"), "-o", p(w, "new.sig")],
        "--key": lambda w, b: ["manifest", "sign", p(w, "ckpt"), "--key", b, "-o", p(w, "new.sig")],
    },
    "audit verify": {
        "LOG": lambda w, b: ["audit", "verify", b],
        "--container": lambda w, b: ["audit", "verify", p(w, LOG), "--container", b],
        "--input": lambda w, b: ["audit", "verify", p(w, LOG), "--input", f"x={b}"],
        "--trust": lambda w, b: ["audit", "verify", p(w, LOG), "--trust", b],
    },
    "audit show": {"LOG": lambda w, b: ["audit", "show", b]},
    "audit attest": {
        "LOG": lambda w, b: ["audit", "attest", b, "--key", p(w, "ec.pem"), "-o", p(w, "new.intoto.json")],
        "--key": lambda w, b: ["audit", "attest", p(w, LOG), "--key", b, "-o", p(w, "new.intoto.json")],
    },
    "audit verify-attestation": {
        "ATTESTATION": lambda w, b: ["audit", "verify-attestation", b, "--trust", p(w, "ec.pub")],
        "--trust": lambda w, b: ["audit", "verify-attestation", p(w, "run.intoto.json"), "--trust", b],
        "--log": lambda w, b: ["audit", "verify-attestation", p(w, "run.intoto.json"), "--trust", p(w, "ec.pub"), "--log", b],
    },
    "replay": {
        "LOG": lambda w, b: ["replay", b, "--container", p(w, SEAL)],
        "--container": lambda w, b: ["replay", p(w, LOG), "--container", b],
        "--inputs": lambda w, b: ["replay", p(w, LOG), "--container", p(w, SEAL), "--inputs", b],
    },
    "parity": {
        "MODEL": lambda w, b: ["parity", b, "--random-inputs"],
        "--input": lambda w, b: ["parity", p(w, M), "--input", f"x={b}"],
        "--tolerance-file": lambda w, b: ["parity", p(w, M), "--random-inputs", "--tolerance-file", b],
    },
    "diff": {
        "A": lambda w, b: ["diff", b, p(w, "cap")],
        "B": lambda w, b: ["diff", p(w, LOG), b],
    },
    "compile": {"CONTAINER": lambda w, b: ["compile", b, "-o", p(w, "new.onnx")]},
    "bind": {
        "ARTIFACT": lambda w, b: ["bind", b, "--to", p(w, SEAL)],
        "--to": lambda w, b: ["bind", p(w, "x.npy"), "--to", b],
    },
    "check-binding": {
        "ARTIFACT": lambda w, b: ["check-binding", b, "--container", p(w, SEAL)],
        "--container": lambda w, b: ["check-binding", p(w, "m.opt.onnx"), "--container", b],
    },
    "convert": {"MODEL": lambda w, b: ["convert", b, "-o", p(w, "new.pt2"), "--random-inputs"]},
    "export-parity": {
        "--tolerance-file": lambda w, b: ["export-parity", "tests.torchbridge.models:reused_block", "--input-shape", "x=2x8",
                                          "--tolerance-file", b],
    },
    "falsify": {
        "MODEL": lambda w, b: ["falsify", b, p(w, "p.vnnlib")],
        "PROPERTY": lambda w, b: ["falsify", p(w, "toy.onnx"), b],
    },
    "falsify-bench": {"INSTANCES": lambda w, b: ["falsify-bench", b]},
    "ledger verify": {
        "STORE": lambda w, b: ["ledger", "verify", b, "--trust", p(w, PUB)],
        "--trust": lambda w, b: ["ledger", "verify", p(w, "ledger.db"), "--trust", b],
    },
    "ledger show": {"STORE": lambda w, b: ["ledger", "show", b]},
    "ledger prove": {"STORE": lambda w, b: ["ledger", "prove", b, _record_id(w), "-o", p(w, "new.json")]},
    "ledger consistency": {"STORE": lambda w, b: ["ledger", "consistency", b, "1", "-o", p(w, "new.json")]},
    "ledger check-proof": {
        "PROOF": lambda w, b: ["ledger", "check-proof", b, "--trust", p(w, PUB)],
    },
    "serve": {
        "MODEL": lambda w, b: ["serve", b, *SERVE],
        "--trust": lambda w, b: ["serve", p(w, SEAL), *SERVE, "--trust", b],
        "--sign": lambda w, b: ["serve", p(w, SEAL), "--port", "0", "--sign", b],
        "--ledger": lambda w, b: ["serve", p(w, SEAL), "--port", "0", "--ledger", b],
        "--token-file": lambda w, b: ["serve", p(w, SEAL), *SERVE, "--token-file", b],
        "--ssl-certfile": lambda w, b: ["serve", p(w, SEAL), *SERVE, "--ssl-certfile", b, "--ssl-keyfile", p(w, KEY)],
        "--ssl-keyfile": lambda w, b: ["serve", p(w, SEAL), *SERVE, "--ssl-certfile", p(w, PUB), "--ssl-keyfile", b],
    },
    "serve-token": {"--token-file": lambda w, b: ["serve-token", "alice", "--token-file", b]},
    "batch": {
        "MODEL": lambda w, b: ["batch", b, p(w, "reqs"), *BATCH],
        "INPUTS": lambda w, b: ["batch", p(w, SEAL), b, *BATCH],
        "--ledger": lambda w, b: ["batch", p(w, SEAL), p(w, "reqs"), "--ledger", b],
        "--trust": lambda w, b: ["batch", p(w, SEAL), p(w, "reqs"), *BATCH, "--trust", b],
        "--sign": lambda w, b: ["batch", p(w, SEAL), p(w, "reqs"), "--ledger", p(w, "batch.db"), "--sign", b],
    },
    "ledger replay": {
        "STORE": lambda w, b: ["ledger", "replay", b, "--container", p(w, SEAL)],
        "--container": lambda w, b: ["ledger", "replay", p(w, "ledger.db"), "--container", b],
        "--trust": lambda w, b: ["ledger", "replay", p(w, "ledger.db"), "--container", p(w, SEAL), "--trust", b],
        "--sign": lambda w, b: ["ledger", "replay", p(w, "ledger.db"), "--container", p(w, SEAL), "--sign", b],
    },
}
SERVE = ["--port", "0", "--sign", "{key}", "--ledger", "{ledger}"]
BATCH = ["--ledger", "{batch_ledger}", "--sign", "{key}"]

# verb -> {what is written: argv with the bad path in that place}
WRITES: dict[str, dict[str, Argv]] = {
    "run": {
        "--out": lambda w, o: ["run", p(w, M), "--random-inputs", "--out", o],
        "--audit": lambda w, o: ["run", p(w, M), "--random-inputs", "--audit", o],
        "--attest": lambda w, o: ["run", p(w, M), "--random-inputs", "--audit", p(w, "attested.jsonl"), "--sign-log", p(w, KEY),
                                  "--attest", o],
    },
    "keygen": {"-o": lambda w, o: ["keygen", "-o", o]},
    "seal": {"-o": lambda w, o: ["seal", p(w, M), "-o", o]},
    "sign": {"-o": lambda w, o: ["sign", p(w, SEAL), "--key", p(w, KEY), "-o", o]},
    "unseal": {"-o": lambda w, o: ["unseal", p(w, SEAL), "-o", o]},
    "manifest create": {"-o": lambda w, o: ["manifest", "create", p(w, "ckpt"), "-o", o]},
    "manifest sign": {"-o": lambda w, o: ["manifest", "sign", p(w, "ckpt"), "--key", p(w, "ec.pem"), "-o", o]},
    "audit attest": {"-o": lambda w, o: ["audit", "attest", p(w, LOG), "--key", p(w, "ec.pem"), "-o", o]},
    "compile": {"-o": lambda w, o: ["compile", p(w, SEAL), "-o", o]},
    "convert": {"-o": lambda w, o: ["convert", p(w, M), "-o", o, "--random-inputs"]},
    "parity": {"--report": lambda w, o: ["parity", p(w, M), "--random-inputs", "--report", o]},
    "falsify": {
        "--result": lambda w, o: ["falsify", p(w, "toy.onnx"), p(w, "p.vnnlib"), "--result", o],
        "--audit": lambda w, o: ["falsify", p(w, "toy.onnx"), p(w, "p.vnnlib"), "--audit", o],
    },
    "falsify-bench": {"--out": lambda w, o: ["falsify-bench", p(w, "instances.csv"), "--out", o]},
    "ledger prove": {"-o": lambda w, o: ["ledger", "prove", p(w, "ledger.db"), _record_id(w), "-o", o]},
    "ledger consistency": {"-o": lambda w, o: ["ledger", "consistency", p(w, "ledger.db"), "1", "-o", o]},
}

# Outputs whose name the verb fixes by suffix: the bad output keeps it, so the suffix is not what fails.
SUFFIX = {("run", "--out"): ".npz", ("run", "--audit"): ".jsonl", ("convert", "-o"): ".pt2",
          ("parity", "--report"): ".json", ("falsify-bench", "--out"): ".md", ("keygen", "-o"): ".pem"}


def _verbs() -> list[str]:
    _load_commands()
    found: list[str] = []

    def walk(group: click.Group, prefix: str) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, f"{prefix}{name} ")
            else:
                found.append(f"{prefix}{name}")

    walk(app, "")
    return sorted(found)


def test_the_table_names_every_verb() -> None:
    assert sorted(READS) == _verbs(), "list the files of every verb in READS (and WRITES)"
    assert set(WRITES) <= set(READS)


# Where the bad kind is in fact good input: an empty TOML document is an empty tolerance table; any
# file (an empty one too) can be bound to a container; a ledger (serve, batch) or token file that does
# not exist yet is created, and an empty one is an empty ledger or token table.
VALID = {("parity", "--tolerance-file", "empty"), ("export-parity", "--tolerance-file", "empty"), ("bind", "ARTIFACT", "empty"), ("serve", "--ledger", "missing"),
         ("serve", "--ledger", "empty"), ("serve-token", "--token-file", "missing"),
         ("serve-token", "--token-file", "empty"), ("batch", "--ledger", "missing"), ("batch", "--ledger", "empty")}


def _bad_input(w: Path, kind: str, what: str) -> str:
    # A directory argument (named with a trailing '/') is given a plain file where others get a directory.
    directory = p(w, "exists.txt") if what.endswith("/") else p(w, "adir")
    return {"missing": p(w, "missing.file"), "directory": directory, "empty": p(w, "empty"),
            "dev-zero": "/dev/zero"}[kind]


def _bad_output(w: Path, kind: str, suffix: str) -> str:
    if kind == "exists":
        target = w / f"exists{suffix}"
        target.write_text("mine\n")
        return str(target)
    return {"directory": p(w, "adir"), "missing-directory": str(w / "nowhere" / f"out{suffix}"),
            "dev-zero": "/dev/zero"}[kind]


class AcceptedError(Exception):
    """The server was about to start: the bad input was accepted."""


def _no_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    # A bad input that `serve` accepted would start a server that never returns: fail instead.
    uvicorn = pytest.importorskip("uvicorn")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AcceptedError("serve started despite the bad input")

    monkeypatch.setattr(uvicorn.Server, "run", refuse)


def _one_error_line(err: str) -> None:
    assert err.startswith("sealtrace: error: ") and err.count("\n") == 1 and "Traceback" not in err, err


READ_CASES = [
    (verb, what, kind) for verb, files in READS.items() for what in files
    for kind in ("missing", "directory", "empty", "dev-zero") if (verb, what, kind) not in VALID
]
WRITE_CASES = [(verb, what) for verb, files in WRITES.items() for what in files]


@pytest.mark.parametrize(("verb", "what", "kind"), READ_CASES, ids=[" ".join(c) for c in READ_CASES])
def test_bad_input_file(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, verb: str, what: str, kind: str
) -> None:
    _no_serving(monkeypatch)
    argv = [a.format(key=p(work, KEY), ledger=p(work, "serve.db"), batch_ledger=p(work, "batch.db")) for a in READS[verb][what](work, _bad_input(work, kind, what))]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    _one_error_line(err)


@pytest.mark.parametrize("kind", ["exists", "directory", "missing-directory", "dev-zero"])
@pytest.mark.parametrize(("verb", "what"), WRITE_CASES, ids=[f"{v} {w}" for v, w in WRITE_CASES])
def test_bad_output_file(work: Path, capsys: pytest.CaptureFixture[str], verb: str, what: str, kind: str) -> None:
    out = _bad_output(work, kind, SUFFIX.get((verb, what), ".out"))
    code = main(WRITES[verb][what](work, out))
    err = capsys.readouterr().err
    assert code == 2, err
    _one_error_line(err)
    if kind == "exists":
        assert Path(out).read_text() == "mine\n"


@pytest.mark.parametrize("suffix", [".csv", ".md"])
def test_falsify_bench_keeps_either_existing_table(work: Path, capsys: pytest.CaptureFixture[str], suffix: str) -> None:
    # falsify-bench --out T writes T.md and T.csv: an existing one of the pair is refused by name.
    out = work / f"table{suffix}"
    out.write_text("mine\n")
    assert main(["falsify-bench", p(work, "instances.csv"), "--out", str(out)]) == 2
    assert capsys.readouterr().err == f"sealtrace: error: --out 1 {out}: file exists (use --force to overwrite)\n"
    assert out.read_text() == "mine\n"
