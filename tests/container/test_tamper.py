"""Tampering: every single-byte flip and every truncation of a small signed container is refused;
edits that keep the container self-consistent break its digest and every signature."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from sealtrace.container import (
    ContainerFormatError,
    IntegrityError,
    open_container,
    seal_model,
    verify_container,
)
from sealtrace.container.format import PREAMBLE_SIZE
from sealtrace.digest import json_digest
from tests.container.conftest import assemble, edited, split, tiny_model


@pytest.fixture
def signed(tmp_path: Path, keys: dict[str, Path]) -> bytes:
    seal_model(tiny_model(), tmp_path / "tiny.seal", sign_with=keys["alice"])
    return (tmp_path / "tiny.seal").read_bytes()


def _refused(data: bytes) -> str:
    """'format' or 'integrity' for a refused container; fails the test if it is accepted."""
    try:
        verify_container(data, workers=1)
    except ContainerFormatError:
        return "format"
    except IntegrityError:
        return "integrity"
    raise AssertionError("tampered container accepted")


def test_every_single_byte_flip_is_detected(signed: bytes) -> None:
    assert len(signed) < 4096  # keeps this exhaustive test at a few seconds
    with open_container(signed) as c:
        owner = {}
        for e in c.entries:
            for i in range(c.data_start + e.offset, c.data_start + e.offset + e.length):
                owner[i] = (e.kind, e.name)
    kinds: dict[str, int] = {}
    for i in range(len(signed)):
        for mask in (0x01, 0x80, 0xFF):
            data = bytearray(signed)
            data[i] ^= mask
            try:
                verify_container(bytes(data), workers=1)
            except ContainerFormatError:
                kinds["format"] = kinds.get("format", 0) + 1
                continue
            except IntegrityError as exc:
                kinds["integrity"] = kinds.get("integrity", 0) + 1
                if i in owner:
                    # A flip in a section or tensor names exactly that one (and, in the graph
                    # section, what in the graph changed, when the bytes still split into records).
                    named = [(m.kind, m.name) for m in exc.mismatches]
                    assert named[0] == owner[i] and all(kind == "graph" for kind, _ in named[1:]), (i, named)
                    kinds["graph detail"] = kinds.get("graph detail", 0) + (len(named) > 1)
                continue
            raise AssertionError(f"flip {mask:#04x} at byte {i} of {len(signed)} was not detected")
    assert kinds["integrity"] > 0 and kinds["format"] > 0 and kinds["graph detail"] > 0


def test_every_truncation_is_detected(signed: bytes) -> None:
    for n in range(len(signed)):
        _refused(signed[:n])
    assert _refused(signed + b"\0") == "integrity"  # and one byte too many


def test_tensor_data_replaced_is_refused_naming_the_tensor(signed: bytes) -> None:
    with open_container(signed) as c:
        w = c.entry("W")
        start = c.data_start + w.offset
    replacement = np.full(6, 9.0, np.float32).tobytes()
    data = signed[:start] + replacement + signed[start + len(replacement) :]
    with pytest.raises(IntegrityError) as info:
        verify_container(data)
    (m,) = info.value.mismatches
    assert (m.kind, m.name, m.offset) == ("tensor", "W", start)
    assert m.expected.startswith("sha256 ") and hashlib.sha256(replacement).hexdigest() in m.actual


def test_header_edit_with_recomputed_digests_breaks_digest_and_signature(signed: bytes, keys: dict[str, Path]) -> None:
    original = verify_container(signed).digest
    with open_container(signed) as c:
        w = c.entry("W")
        start = c.data_start + w.offset
    replacement = np.full(6, 9.0, np.float32).tobytes()
    data = signed[:start] + replacement + signed[start + len(replacement) :]

    def recompute(header: dict) -> None:
        for t in header["container"]["tensors"]:
            if t["name"] == "W":
                t["sha256"] = [hashlib.sha256(replacement).hexdigest()]

    forged = edited(data, recompute)
    # The stored signature (its public key travels with it) no longer covers the digest: refused
    # even by a reader holding no key.
    with pytest.raises(IntegrityError, match="invalid signature"):
        verify_container(forged)
    with pytest.raises(IntegrityError, match="signature"):
        verify_container(forged, trust=[keys["alice.pub"]], require_signature=True)

    def strip(header: dict) -> None:
        recompute(header)
        header["signatures"] = []

    unsigned = edited(data, strip)
    # Self-consistent and unsigned: the digest is what changed, so a pinned digest or a required
    # signature refuses it.
    report = verify_container(unsigned)
    assert report.ok and report.digest != original
    with pytest.raises(IntegrityError, match="container digest"):
        verify_container(unsigned, expect_digest=original)
    with pytest.raises(IntegrityError, match="trusted signature"):
        verify_container(unsigned, trust=[keys["alice.pub"]], require_signature=True)


def test_resigning_with_another_key_is_not_trusted(signed: bytes, keys: dict[str, Path]) -> None:
    from sealtrace.container.signatures import sign

    def resign(header: dict) -> None:
        header["signatures"] = [s.to_json() for s in sign(json_digest(header["container"]), [keys["mallory"]])]

    forged = edited(signed, resign)
    assert verify_container(forged).ok  # valid, by some key
    with pytest.raises(IntegrityError, match="trusted signature"):
        verify_container(forged, trust=[keys["alice.pub"]], require_signature=True)


def test_untrusted_signature_is_refused_when_a_trusted_one_is_required(signed: bytes, keys: dict[str, Path]) -> None:
    report = verify_container(signed, trust=[keys["mallory.pub"]], raise_on_failure=False)
    # Trust keys refuse what they did not sign, with or without require_signature (issue 14, item 2:
    # this was `report.ok`, a trust that did not refuse).
    assert not report.ok and [m.kind for m in report.mismatches] == ["signature"]
    assert [(s.valid, s.trusted) for s in report.signatures] == [(True, False)]
    with pytest.raises(IntegrityError, match="trusted signature"):
        verify_container(signed, trust=[keys["mallory.pub"]], require_signature=True)
    report = verify_container(signed, trust=[keys["alice.pub"]], require_signature=True)
    assert [(s.valid, s.trusted) for s in report.signatures] == [(True, True)]


def test_stripped_signature_is_refused_when_required(signed: bytes, keys: dict[str, Path]) -> None:
    def strip(header: dict) -> None:
        header["signatures"] = []

    bare = edited(signed, strip)
    assert verify_container(bare).digest == verify_container(signed).digest  # same content
    with pytest.raises(IntegrityError, match="trusted signature"):
        verify_container(bare, trust=[keys["alice.pub"]], require_signature=True)


def test_preamble_digest_must_match_header(signed: bytes) -> None:
    header, area = split(signed)
    with pytest.raises(IntegrityError, match="header 'container'"):
        verify_container(assemble(header, area, digest="0" * 64))


def test_unknown_format_version_is_refused(signed: bytes) -> None:
    header, area = split(signed)
    with pytest.raises(ContainerFormatError, match="version 3 is not supported"):
        open_container(assemble(header, area, version=3))
    assert PREAMBLE_SIZE == 48


def test_countersigning_keeps_the_digest_and_adds_a_trusted_signature(
    signed: bytes, tmp_path: Path, keys: dict[str, Path]
) -> None:
    from sealtrace.cli import main
    from sealtrace.container import add_signatures

    (tmp_path / "a.seal").write_bytes(signed)
    ids = add_signatures(tmp_path / "a.seal", tmp_path / "ab.seal", [keys["mallory"], keys["alice"]])
    assert len(ids) == 2  # alice had signed already
    report = verify_container(tmp_path / "ab.seal", trust=[keys["mallory.pub"]], require_signature=True)
    assert report.digest == verify_container(signed).digest
    assert main(["sign", str(tmp_path / "a.seal"), "--key", str(keys["mallory"])]) == 0  # in place
    assert verify_container(tmp_path / "a.seal", trust=[keys["mallory.pub"]], require_signature=True).ok
    data = bytearray(signed)
    data[-1] ^= 1
    (tmp_path / "bad.seal").write_bytes(bytes(data))
    with pytest.raises(IntegrityError):
        add_signatures(tmp_path / "bad.seal", tmp_path / "never.seal", keys["mallory"])  # never signs a bad one
    assert not (tmp_path / "never.seal").exists()
    # An existing -o is refused before the container is read (it was found only after verifying).
    (tmp_path / "mine.seal").write_bytes(b"mine")
    assert main(["sign", str(tmp_path / "bad.seal"), "--key", str(keys["mallory"]), "-o", str(tmp_path / "mine.seal")]) == 2
    assert (tmp_path / "mine.seal").read_bytes() == b"mine"


def test_verify_refuses_what_loading_would_refuse(signed: bytes) -> None:
    """A self-consistent header whose tensor storage cannot hold its dtype: run refused it (exit 1)
    while verify said OK. Now both fail the check."""
    from sealtrace.container import load_verified_model

    def edit(header: dict) -> None:  # type: ignore[type-arg]
        header["signatures"] = []
        header["container"]["tensors"][0]["storage"] = "int64_data"  # W is float

    forged = edited(signed, edit)
    with pytest.raises(IntegrityError, match="cannot hold"):
        verify_container(forged)
    with pytest.raises(IntegrityError, match="cannot hold"):
        load_verified_model(forged)


def test_trust_alone_refuses_through_every_api(signed: bytes, keys: dict[str, Path], tmp_path: Path) -> None:
    """trust= means: refuse what these keys did not sign, in every API that takes it."""
    from sealtrace import Session
    from sealtrace.container import load_verified_model, unseal
    from sealtrace.session import open_model

    path = tmp_path / "signed.seal"
    path.write_bytes(signed)
    stranger = [keys["mallory.pub"]]
    for call in (
        lambda: load_verified_model(path, trust=stranger),
        lambda: unseal(path, tmp_path / "out.onnx", trust=stranger),
        lambda: open_model(path, trust=stranger),
        lambda: Session(path, trust=stranger),
    ):
        with pytest.raises(IntegrityError, match="trusted signature"):
            call()
    assert not (tmp_path / "out.onnx").exists()
    assert Session(path, trust=[keys["alice.pub"]]).origin.signed_by == (
        verify_container(signed).signatures[0].key_id,
    )
