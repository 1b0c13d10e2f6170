"""falsify(): a known violation is found and certified; a safe property gives unknown; a wrong torch
module cannot produce sat; search settings, budgets and the Python property API."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from sealtrace.audit import verify_log
from sealtrace.errors import InputError
from sealtrace.falsify import (
    Box,
    Certificate,
    LinearConstraint,
    OutputSet,
    Property,
    PropertyError,
    SearchSettings,
    falsify,
    load_vnnlib,
    save_violation,
)
from sealtrace.falsify.search import float_bounds
from sealtrace.limits import memory_budget_of
from tests.falsify.conftest import two_input_network

FAST = SearchSettings(timeout_s=20, batch=64, steps=20, samples=256)


def test_known_violation_is_found_and_certified(toy_file: Path, violated_file: Path, tmp_path: Path) -> None:
    log = tmp_path / "cex.jsonl"
    result = falsify(toy_file, load_vnnlib(violated_file), FAST, audit=log, cache_dir=tmp_path / "cache")
    assert result.status == "sat" and result.certified
    cex = result.counterexample
    assert cex is not None and cex.confirmed and cex.inside_box
    x0, x1 = (float(v) for v in cex.x)
    assert 0 <= x1 <= x0 <= 1 and x0 - x1 >= 0.75
    # The constraint value is exact: -Y_1 + 0.75 computed on the float32 output without rounding.
    (value,) = cex.values
    assert value.holds and value.value == Fraction("0.75") - Fraction(float(cex.y[1]))
    assert value.source.endswith("violated.vnnlib:10:9")
    # The audit log of the certifying run is on disk, verifies, and links to the container and input.
    assert cex.audit_log == str(log)
    check = verify_log(log, model=result.container, inputs=cex.feeds)
    assert check.ok and check.run_digest == cex.run_digest
    assert result.vnncomp_text().startswith("sat\n((X_0 ")
    assert f"(Y_1 {float(cex.y[1])!r})" in result.vnncomp_text()
    npy = tmp_path / "cex.npy"
    save_violation(result, npy)
    np.testing.assert_array_equal(np.load(npy), cex.x.reshape(1, 2))


def test_safe_property_is_unknown_never_unsat(toy_file: Path, safe_file: Path, tmp_path: Path) -> None:
    settings = SearchSettings(timeout_s=20, batch=32, steps=10, samples=128, max_starts=96)
    result = falsify(toy_file, load_vnnlib(safe_file), settings, cache_dir=tmp_path)
    assert result.status == "unknown" and not result.certified
    assert result.stats.stopped_by == "starts" and result.stats.starts == 96
    assert result.vnncomp_text() == "unknown\n"
    assert result.stats.best_margin > 0.4  # y0 <= 2: the margin 2.5 - y0 never drops below 0.5


class ClaimsViolation(torch.nn.Module):
    """A wrong 'conversion': says y1 = 5 everywhere, so every point looks like a counterexample."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([x[:, 0] * 0, x[:, 0] * 0 + 5], dim=1)


def test_candidate_the_reference_run_refutes_is_not_sat(toy_file: Path, tmp_path: Path) -> None:
    # True network: y1 = relu(x0 - x1) <= 0.5 on this box, so "y1 >= 0.75" has no counterexample.
    prop = Property.unsafe(
        Box.of([0, 0], [0.5, 1]), [OutputSet((LinearConstraint.of({1: -1}, "0.75"),))], n_outputs=2
    )
    rejected: list[Certificate] = []
    settings = SearchSettings(timeout_s=20, batch=8, steps=5, samples=16, max_starts=16)
    result = falsify(toy_file, prop, settings, module=ClaimsViolation(), cache_dir=tmp_path,
                     audit=tmp_path / "never.jsonl", on_rejected=rejected.append)
    assert result.status == "unknown" and result.counterexample is None
    assert result.rejected_count == len(rejected) > 0
    first = result.rejected[0]
    assert not first.confirmed and first.inside_box
    assert "satisfy no output set" in first.reason
    assert first.values[0].value > 0 and not first.values[0].holds
    assert not (tmp_path / "never.jsonl").exists()  # a refuted run leaves no log behind
    assert not list(tmp_path.glob(".never.jsonl.*"))


def test_same_seed_same_counterexample(toy_file: Path, violated_file: Path, tmp_path: Path) -> None:
    prop = load_vnnlib(violated_file)
    runs = [falsify(toy_file, prop, SearchSettings(seed=7, samples=0, batch=16, steps=10), cache_dir=tmp_path)
            for _ in range(2)]
    a, b = (r.counterexample for r in runs)
    assert a is not None and b is not None
    np.testing.assert_array_equal(a.x, b.x)
    assert runs[0].stats.to_json()["starts"] == runs[1].stats.to_json()["starts"]


@pytest.mark.parametrize("method", ["pgd", "adam"])
def test_each_gradient_method_finds_it_without_sampling(toy_file: Path, tmp_path: Path, method: str) -> None:
    # Unsafe if y1 >= 0.999: only a corner pocket of the box (x0 ~ 1, x1 ~ 0).
    prop = Property.unsafe(Box.of([0, 0], [1, 1]), [OutputSet((LinearConstraint.of({1: -1}, "0.999"),))], 2)
    settings = SearchSettings(samples=0, batch=8, steps=40, methods=(method,), slack=0)
    result = falsify(toy_file, prop, settings, cache_dir=tmp_path)
    assert result.certified and result.counterexample is not None
    assert result.counterexample.method == method


def test_disjunction_of_regions_and_output_sets(toy_file: Path, tmp_path: Path) -> None:
    # Region 0 holds no counterexample (y0 <= 0.2 there); region 1 does (y0 = x0 + x1 up to 2).
    sets = (OutputSet((LinearConstraint.of({0: -1}, "1.5"),)), OutputSet((LinearConstraint.of({1: -1}, 5),)))
    prop = Property(
        (
            Property.unsafe(Box.of([0, 0], [0.1, 0.1]), sets, 2).regions[0],
            Property.unsafe(Box.of([0.5, 0.5], [1, 1]), sets, 2).regions[0],
        ),
        n_inputs=2, n_outputs=2,
    )
    result = falsify(toy_file, prop, FAST, cache_dir=tmp_path)
    assert result.certified and result.counterexample is not None
    assert (result.counterexample.region, result.counterexample.output_set) == (1, 0)


def test_robustness_property_api(toy_file: Path, tmp_path: Path) -> None:
    # At (0.6, 0.5): y = (1.1, 0.1), class 0 wins; within 0.5 class 1 can win only if x0 - x1 >= x0 + x1.
    prop = Property.robustness(np.array([0.6, 0.5]), 0.5, label=0, n_outputs=2, lower=0, upper=1)
    assert prop.regions[0].box.lower == (Fraction(0.09999999999999998), Fraction(0))
    result = falsify(toy_file, prop, FAST, cache_dir=tmp_path)
    assert result.certified and result.counterexample is not None
    assert float(result.counterexample.x[1]) == 0.0  # needs x1 <= 0: the lower edge


def test_extra_input_fixed_or_boxed(tmp_path: Path) -> None:
    model = two_input_network()
    unsafe = [OutputSet((LinearConstraint.of({0: -1}, 2),))]  # y0 = x0 + shift >= 2
    prop = Property.unsafe(Box.of([0, 0], [1, 1]), unsafe, 2)
    # Fixed shift 0.5: y0 <= 1.5, nothing to find.
    fixed = falsify(model, prop, SearchSettings(max_starts=32, batch=16, steps=5, samples=64),
                    fixed_inputs={"shift": np.array([[0.5]], np.float32)}, cache_dir=tmp_path)
    assert fixed.status == "unknown"
    # Boxed shift in [0.5, 1.5]: X_2 is the shift; y0 reaches 2.5.
    boxed = falsify(model, prop.with_extra_inputs([0.5], [1.5]), FAST, cache_dir=tmp_path)
    assert boxed.certified and boxed.counterexample is not None
    assert set(boxed.counterexample.feeds) == {"x", "shift"} and boxed.searched_inputs == ["x", "shift"]


def test_property_that_does_not_fit_the_model(toy_file: Path, tmp_path: Path) -> None:
    prop = Property.unsafe(Box.of([0, 0, 0], [1, 1, 1]), [OutputSet(())], 2, name="three.vnnlib")
    with pytest.raises(PropertyError, match=r"declares 3 inputs .* x\[1, 2\] hold 2 values"):
        falsify(toy_file, prop, FAST, cache_dir=tmp_path)
    with pytest.raises(InputError, match="unknown input"):
        falsify(toy_file, prop, FAST, cache_dir=tmp_path, fixed_inputs={"nope": 1})


def test_float_bounds_round_inward() -> None:
    box = Box((Fraction("0.1"), Fraction(0)), (Fraction("0.3"), Fraction(1)), (False, True), (False, True))
    lo, hi = float_bounds(box, np.dtype(np.float32))
    assert Fraction(float(lo[0])) >= Fraction("0.1") and Fraction(float(hi[0])) <= Fraction("0.3")
    assert lo[0] == np.nextafter(np.float32(0.1), np.float32(1)) or Fraction(float(np.float32(0.1))) >= Fraction("0.1")
    assert lo[1] > 0 and hi[1] < 1  # strict bounds step one float inward
    assert box.contains([Fraction(float(lo[0])), Fraction(float(lo[1]))])


def test_box_without_a_float32_point_is_skipped(toy_file: Path, tmp_path: Path) -> None:
    # No float32 lies strictly between 0.1 and its float32 successor's exact decimal neighbour.
    a = Fraction(float(np.float32(0.1)))
    b = Fraction(float(np.nextafter(np.float32(0.1), np.float32(1))))
    box = Box((a, Fraction(0)), (b, Fraction(1)), (True, False), (True, False))
    prop = Property.unsafe(box, [OutputSet(())], 2)
    result = falsify(toy_file, prop, FAST, cache_dir=tmp_path)
    assert result.status == "unknown" and result.stats.stopped_by == "no-region"
    assert result.stats.skipped_regions


def test_empty_output_set_means_every_point(toy_file: Path, tmp_path: Path) -> None:
    prop = Property.unsafe(Box.of([0, 0], [1, 1]), [OutputSet(())], 2)
    result = falsify(toy_file, prop, FAST, cache_dir=tmp_path)
    assert result.certified and result.stats.samples > 0 and result.stats.starts == 0


def test_exact_decimal() -> None:
    from sealtrace.falsify.certify import exact_decimal

    assert exact_decimal(Fraction(1, 8)) == "0.125"
    assert exact_decimal(Fraction(-3, 40)) == "-0.075"
    assert exact_decimal(Fraction(5)) == "5"
    assert exact_decimal(Fraction(1, 3)) == "1/3"
    assert exact_decimal(Fraction(float(np.float32(0.1)))) == "0.100000001490116119384765625"


class FixedShapeToy(torch.nn.Module):
    """The toy network written for exactly one input of shape [1, 2] (no leading batch)."""

    def __init__(self, data_dependent: bool = False) -> None:
        super().__init__()
        self.w = torch.tensor([[1.0, 1.0], [1.0, -1.0]])
        self.data_dependent = data_dependent

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.data_dependent and bool(x.sum() > 100):  # python control flow on a value: vmap refuses it
            return x
        return torch.relu(x.reshape(1, 2) @ self.w)


@pytest.mark.parametrize(("data_dependent", "mode"), [(False, "vmap"), (True, "loop")])
def test_modules_without_a_leading_batch(toy_file: Path, violated_file: Path, tmp_path: Path,
                                         data_dependent: bool, mode: str) -> None:
    result = falsify(toy_file, load_vnnlib(violated_file), FAST, module=FixedShapeToy(data_dependent),
                     cache_dir=tmp_path)
    assert result.batching == mode
    assert result.certified


def test_seal_cache_holds_only_the_sealing_of_these_model_bytes(toy_file: Path, tmp_path: Path) -> None:
    """A cached <key>.seal is used only when it verifies and is the sealing of exactly this model;
    a garbage file or another model's container under that name is sealed over (issue 14, item 7)."""
    import hashlib

    import onnx

    from sealtrace.container import describe_container, seal_model
    from sealtrace.falsify import sealed_container
    from tests.falsify.conftest import two_input_network

    cache = tmp_path / "cache"
    first = sealed_container(toy_file, cache)
    want = describe_container(first)["container_digest"]
    assert first.name == hashlib.sha256(toy_file.read_bytes()).hexdigest() + ".seal"
    assert sealed_container(toy_file, cache) == first

    impostor = tmp_path / "impostor.onnx"
    onnx.save(two_input_network(), impostor)
    seal_model(impostor, first, force=True)  # a valid container, of another model
    assert describe_container(sealed_container(toy_file, cache))["container_digest"] == want
    first.write_bytes(b"\x89SEAL\r\n\x1a garbage")
    assert describe_container(sealed_container(toy_file, cache))["container_digest"] == want
    raw = bytearray(first.read_bytes())
    raw[-1] ^= 1  # a tampered tensor: verification fails, so it is sealed again
    first.write_bytes(bytes(raw))
    assert describe_container(sealed_container(toy_file, cache))["container_digest"] == want
    from sealtrace.container import verify_container

    assert verify_container(first).ok


def test_seal_cache_key_covers_external_data(tmp_path: Path) -> None:
    import onnx

    from sealtrace.falsify import sealed_container
    from sealtrace.plan.modelfile import model_file_digest
    from tests.falsify.conftest import toy_network

    model = tmp_path / "ext.onnx"
    onnx.save(toy_network(), model, save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    first = sealed_container(model, tmp_path / "cache")
    assert first.name == model_file_digest(model) + ".seal"
    data = tmp_path / "ext.onnx.data"
    raw = bytearray(data.read_bytes())
    raw[0] ^= 0x40
    data.write_bytes(bytes(raw))
    assert sealed_container(model, tmp_path / "cache") != first  # new weights, new key, sealed again


class _RowCounter(torch.nn.Module):
    """The toy network (y = relu(x @ W)) that remembers the most rows one call was given."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.tensor([[1.0, 1.0], [1.0, -1.0]])
        self.most_rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.most_rows = max(self.most_rows, x.numel() // 2)
        return torch.relu(x @ self.weight)


def test_batches_are_sized_to_the_memory_budget(toy_file: Path, safe_file: Path, tmp_path: Path) -> None:
    # Sampling drew 4,096 rows at a time whatever the input size (2.4 GB at 25k inputs).
    prop = load_vnnlib(safe_file)
    settings = SearchSettings(timeout_s=20, max_starts=64, batch=64, steps=2, samples=4096)
    module = _RowCounter()
    # A row of 2 inputs and 2 outputs (float32) is counted as 16 copies: 256 bytes; a quarter of 40 KiB fits 40.
    with memory_budget_of(40 * 1024):
        result = falsify(toy_file, prop, settings, module=module, cache_dir=tmp_path)
    # A sampling pass is at most 64 batches: with batches of 40 rows, 2,560 of the 4,096 samples asked for.
    assert result.status == "unknown" and result.stats.samples == 64 * 40 and result.stats.starts == 64
    assert module.most_rows == 40
    module.most_rows = 0
    falsify(toy_file, prop, settings, module=module, cache_dir=tmp_path)
    assert module.most_rows == 4096  # the default budget holds the full batch of such small rows


def test_float_bounds_beyond_float_range_and_at_exact_values() -> None:
    huge = Fraction(10) ** 400
    box = Box((-huge, Fraction(1, 2), Fraction(1, 2)), (huge, Fraction(1, 2), Fraction(3, 4)),
              (False, False, True), (False, False, False))
    lo, hi = float_bounds(box, np.dtype(np.float32))
    top = np.finfo(np.float32).max
    assert (lo[0], hi[0]) == (-top, top)
    assert (lo[1], hi[1]) == (0.5, 0.5)  # an exact float32 bound is kept
    assert lo[2] == np.nextafter(np.float32(0.5), np.float32(1)) and hi[2] == 0.75  # strict: one step inward
