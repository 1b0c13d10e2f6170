"""The layering of docs/architecture.md holds: no import circles, nothing imports up the layers,
every package has a layer (benchmarks/structure.py measures it; lazy imports count too)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.structure import Figures, measure

SRC = Path(__file__).resolve().parents[1] / "src" / "sealtrace"


@pytest.fixture(scope="module")
def figures() -> Figures:
    return measure(SRC)


def test_no_module_imports_in_a_circle(figures: Figures) -> None:
    assert figures.circles == []


def test_no_package_imports_in_a_circle(figures: Figures) -> None:
    assert figures.package_circles == []


def test_nothing_imports_up_the_layers(figures: Figures) -> None:
    assert figures.upward == []


def test_every_package_has_a_layer(figures: Figures) -> None:
    assert figures.unplaced == []


def test_the_measure_sees_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    root = tmp_path / "sealtrace"
    (root / "plan").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "plan" / "__init__.py").write_text("def f():\n    from sealtrace.session import Session\n")
    (root / "session.py").write_text("from sealtrace.plan import f\n")
    seen = measure(root)
    assert seen.circles == [["sealtrace.plan", "sealtrace.session"]]
    assert seen.upward == [("sealtrace.plan", "sealtrace.session")]
