"""sealtrace and the independent Go verifier agree (issue 18): a sample of the agreement corpus here,
every case in ``make verifier-corpus``. Each case: the same exit code and the same named failure."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.verifier.corpus import Material, compare, generate, sample

SAMPLE = 300


def test_a_sample_of_the_corpus_agrees(sealverify: Path, material: Material, tmp_path: Path) -> None:
    cases = generate(material, tmp_path / "cases")
    assert len(cases) >= 10_000  # the whole corpus, of which this runs a sample
    chosen = sample(cases, SAMPLE)
    report = compare(chosen, sealverify, tmp_path)
    assert not report.disagreements, "\n".join(str(d) for d in report.disagreements[:20])
    assert set(report.by_exit) == {0, 1, 2}  # valid, failed and malformed cases are all in the sample
    assert len(report.by_family) == len({c.family for c in cases})


def test_sealverify_prints_one_error_line_and_its_exit_codes(sealverify: Path, material: Material, tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(sealverify), *args], capture_output=True, text=True, check=False)

    ok = run("container", str(material.containers["signed"]), "--trust", str(material.pub))
    assert ok.returncode == 0 and "signed by trusted key" in ok.stdout and not ok.stderr
    damaged = tmp_path / "damaged.seal"
    blob = bytearray(material.containers["signed"].read_bytes())
    blob[-1] ^= 1
    damaged.write_bytes(bytes(blob))
    failed = run("container", str(damaged), "--json")
    verdict = json.loads(failed.stdout)
    assert failed.returncode == 1 and verdict["failures"][0]["kind"] == "tensor"
    assert failed.stderr.count("\n") == 1 and failed.stderr.startswith("sealverify: error:")
    for args in (["container", "/dev/zero"], ["audit", str(tmp_path / "missing.jsonl")], ["nonsense"],
                 ["proof", str(material.proofs["inclusion-2-7"])]):
        bad = run(*args)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not bad.stdout, (args, bad.stderr)
