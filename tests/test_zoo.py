"""sealtrace.zoo without its material: every reader raises MaterialMissingError naming what is missing and
how to get it (so tests skip locally with that message and fail in CI), never a FileNotFoundError, a
traceback or a silently shorter list."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sealtrace import zoo


@pytest.fixture
def no_acasxu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """ACAS Xu looked for in an empty folder."""
    empty = tmp_path / "acasxu"
    empty.mkdir()
    monkeypatch.setattr(zoo, "ACASXU_DIR", empty)
    return empty


@pytest.mark.parametrize(
    "read",
    [
        zoo.acasxu_networks,
        zoo.acasxu_inputs,
        lambda: zoo.acasxu_box(3),
        zoo.acasxu_instances,
        lambda: zoo.acasxu_file("prop_1.vnnlib"),
    ],
    ids=["networks", "inputs", "box", "instances", "file"],
)
def test_every_acasxu_reader_says_what_is_missing_and_how_to_get_it(no_acasxu: Path, read: object) -> None:
    with pytest.raises(zoo.MaterialMissingError) as caught:
        read()  # type: ignore[operator]
    message = str(caught.value)
    assert str(no_acasxu) in message
    assert "make acasxu" in message and "SEALTRACE_ACASXU_DIR" in message


def test_a_partial_copy_is_missing_material_not_a_shorter_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three networks of 45 are not the benchmark: the reader names a missing one instead of returning three."""
    partial = tmp_path / "acasxu"
    partial.mkdir()
    for name in zoo.ACASXU_NETWORKS[:3]:
        (partial / name).write_bytes(b"")
    monkeypatch.setattr(zoo, "ACASXU_DIR", partial)
    with pytest.raises(zoo.MaterialMissingError, match=r"42 of the 45 networks .*ACASXU_run2a_1_4_batch_2000\.onnx"):
        zoo.acasxu_networks()


def test_benchmark_cases_skip_missing_acasxu_with_a_note(no_acasxu: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert zoo.benchmark_cases(["acasxu"]) == []
    assert "acasxu: skipped" in capsys.readouterr().err


def test_missing_material_names_each_case(no_acasxu: Path) -> None:
    missing = zoo.missing_material(["acasxu"])
    assert list(missing) == ["acasxu"] and "make acasxu" in missing["acasxu"]
    with pytest.raises(KeyError):
        zoo.missing_material(["no-such-model"])


def test_missing_speech_says_what_and_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEALTRACE_SPEECH_DIR", str(tmp_path))
    monkeypatch.setattr(zoo, "_SPEECH_DIRS", (tmp_path / "nowhere",))
    zoo.speech_16k.cache_clear()
    try:
        with pytest.raises(zoo.MaterialMissingError) as caught:
            zoo.speech_16k()
    finally:
        zoo.speech_16k.cache_clear()
    message = str(caught.value)
    assert "Front_Center.wav" in message and "alsa-utils" in message and "SEALTRACE_SPEECH_DIR" in message


def test_acasxu_names_match_the_pinned_checksum_list() -> None:
    """zoo's 56 names and benchmarks/acasxu/SHA256SUMS (what `make acasxu` fetches and checks) are one list."""
    sums = Path(__file__).resolve().parents[1] / "benchmarks" / "acasxu" / "SHA256SUMS"
    names = sorted(line.split()[1] for line in sums.read_text().splitlines() if line.strip())
    assert names == sorted([*zoo.ACASXU_NETWORKS, *zoo.ACASXU_PROPERTIES, zoo.ACASXU_INSTANCES])


def test_real_copy_is_found_when_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every file present (a copy of the real material, where this machine has it) the readers work."""
    from tests.conftest import require_material

    source = require_material(zoo.acasxu_instances).parent
    copy = tmp_path / "acasxu"
    shutil.copytree(source, copy)
    monkeypatch.setattr(zoo, "ACASXU_DIR", copy)
    assert len(zoo.acasxu_networks()) == 45
    assert zoo.acasxu_instances() == copy / "acasxu_instances.csv"
    (point,) = zoo.acasxu_inputs(1, count=1)
    assert point["input"].shape == (1, 1, 1, 5)
