"""Key files: written with mode 0600 whatever was there before, never half-written, read bounded."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sealtrace.cli import main
from sealtrace.signing import KeyFileError, generate_keypair, load_private_key, load_public_key


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_force_over_a_world_readable_file_gives_a_private_key_only_the_owner_reads(tmp_path: Path) -> None:
    private = tmp_path / "k.pem"
    private.write_text("an old, world-readable file\n")
    os.chmod(private, 0o644)
    assert main(["keygen", "-o", str(private), "--force"]) == 0
    assert _mode(private) == 0o600  # was 0644: O_TRUNC kept the old file's mode
    load_private_key(private)
    assert _mode(tmp_path / "k.pub") & 0o077 == 0o644 & ~os.umask(os.umask(0)) & 0o077
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.pem", "k.pub"]  # no temporary left


def test_force_replaces_a_symlink_instead_of_writing_through_it(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not a key\n")
    os.chmod(elsewhere, 0o644)
    private = tmp_path / "k.pem"
    private.symlink_to(elsewhere)
    generate_keypair(private, overwrite=True)
    assert elsewhere.read_text() == "not a key\n"  # the private key was written into it before
    assert not private.is_symlink() and _mode(private) == 0o600


@pytest.mark.parametrize("existing", ["k.pem", "k.pub"])
def test_existing_key_files_are_kept_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str], existing: str) -> None:
    (tmp_path / existing).write_text("mine\n")
    assert main(["keygen", "-o", str(tmp_path / "k.pem")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exists" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]
    assert (tmp_path / existing).read_text() == "mine\n"


def test_a_pair_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sealtrace.signing as signing

    real = signing._install
    calls: list[Path] = []

    def failing_second(tmp: Path, target: Path, overwrite: bool) -> None:
        calls.append(target)
        if len(calls) == 2:
            raise KeyFileError(f"{target}: simulated failure")
        real(tmp, target, overwrite)

    monkeypatch.setattr(signing, "_install", failing_second)
    with pytest.raises(KeyFileError, match="simulated"):
        generate_keypair(tmp_path / "k.pem")
    # Neither the private key already in place nor the staged public key is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["dev-zero", "directory", "large"])
def test_key_files_are_read_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    if kind == "dev-zero":
        path = Path("/dev/zero")  # was read forever
    elif kind == "directory":
        path = tmp_path
    else:
        path = tmp_path / "large.pem"
        path.write_bytes(b"-" * (1 << 20))
    with pytest.raises(KeyFileError):
        load_public_key(path)
    with pytest.raises(KeyFileError):
        load_private_key(path)
