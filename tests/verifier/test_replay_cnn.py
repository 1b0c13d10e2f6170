"""``sealverify replay`` of stage (b) of issue 30: the operators of convolutional networks, each in small
models at its hard places (padding edges, strides and dilations, groups, signed zeros, NaN, infinities),
recorded by sealtrace on random inputs and replayed bit for bit by the Go verifier's own kernels."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sealtrace import Session, zoo
from sealtrace.audit import audited_run
from sealtrace.container import seal_model
from tests.conftest import make_model, require_material

# A small model to replay: its name, nodes, inputs and weights.
Case = tuple[str, list[onnx.NodeProto], dict[str, np.ndarray], list[onnx.TensorProto]]

STAGE_B_OPERATORS = {"Concat", "Transpose", "MaxPool", "Clip", "Conv", "AveragePool", "GlobalAveragePool",
                     "BatchNormalization", "HardSigmoid", "HardSwish", "Sigmoid", "Softmax"}


def hard_values(rng: np.random.Generator, shape: tuple[int, ...], specials: bool = True) -> np.ndarray:
    """Normal values of several scales, with signed zeros, ties of small integers and (if asked) NaN and
    infinities in a few places."""
    x = (rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 30.0], size=shape)).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=max(1, flat.size // 8), replace=False)
    flat[picks] = rng.choice(np.array([0.0, -0.0, 0.5, -2.5, 3.0], dtype=np.float32), size=picks.size)
    if specials:
        flat[rng.choice(flat.size, size=3, replace=False)] = [np.nan, np.inf, -np.inf]
    return x


def weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.5).astype(np.float32), name)


def replay(sealverify: Path, tmp_path: Path, name: str, nodes: list[onnx.NodeProto],
           feeds: dict[str, np.ndarray], weights: list[onnx.TensorProto]) -> str:
    """Seals the model, records a run on feeds and replays it with sealverify (inputs from an .npz)."""
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape)) for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)]
    container = tmp_path / f"{name}.seal"
    seal_model(make_model(nodes, inputs, outputs, weights), container)
    log, npz = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.npz"
    audited_run(Session(str(container)), feeds, audit=log)
    np.savez(npz, **feeds)
    done = subprocess.run([str(sealverify), "replay", str(log), "--container", str(container), "--inputs", str(npz)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{name}: {done.stderr}"
    return done.stdout


def stage_b_cases(rng: np.random.Generator) -> list[Case]:
    x = hard_values(rng, (2, 4, 9, 8))
    smooth = hard_values(rng, (2, 4, 9, 8), specials=False)
    bounds = [numpy_helper.from_array(np.array(v, dtype=np.float32), n) for n, v in (("lo", -0.0), ("hi", 2.5), ("zero", 0.0))]
    return [
        ("concat_transpose", [
            helper.make_node("Concat", ["x", "c"], ["j"], name="concat", axis=-3),
            helper.make_node("Transpose", ["j"], ["t"], name="transpose", perm=[2, 0, 3, 1]),
            helper.make_node("Transpose", ["t"], ["y"], name="reverse")],
         {"x": x}, [weight(rng, "c", (2, 3, 9, 8))]),
        ("clip", [
            helper.make_node("Clip", ["x", "lo", "hi"], ["a"], name="clip"),
            helper.make_node("Clip", ["a", "", "zero"], ["b"], name="clip_max_only"),
            helper.make_node("Clip", ["b", "hi", "lo"], ["y"], name="clip_crossed")],
         {"x": x}, bounds),
        ("maxpool", [
            helper.make_node("MaxPool", ["x"], ["a", "i"], name="pool_ceil", kernel_shape=[3, 3], strides=[2, 2],
                             pads=[1, 0, 1, 2], ceil_mode=1),
            helper.make_node("MaxPool", ["a"], ["b"], name="pool_dilated", kernel_shape=[2, 2], dilations=[2, 1]),
            helper.make_node("MaxPool", ["b"], ["y"], name="pool_same", kernel_shape=[3, 2], auto_pad="SAME_UPPER")],
         {"x": x}, []),
        ("conv", [
            helper.make_node("Conv", ["x", "w", "b"], ["a"], name="conv_grouped", group=2, pads=[1, 0, 2, 1],
                             strides=[2, 1], dilations=[1, 2]),
            helper.make_node("Conv", ["a", "dw"], ["c"], name="conv_depthwise", group=6, kernel_shape=[3, 3],
                             auto_pad="SAME_LOWER"),
            helper.make_node("Conv", ["c", "pw", "pb"], ["y"], name="conv_pointwise")],
         {"x": smooth}, [weight(rng, "w", (6, 2, 3, 3)), weight(rng, "b", (6,)), weight(rng, "dw", (6, 1, 3, 3)),
                         weight(rng, "pw", (5, 6, 1, 1)), weight(rng, "pb", (5,))]),
        ("conv_specials", [helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
         {"x": x}, [weight(rng, "w", (3, 4, 3, 3))]),
        ("averagepool", [
            helper.make_node("AveragePool", ["x"], ["a"], name="pool_excluding_pad", kernel_shape=[3, 3],
                             strides=[2, 2], pads=[1, 1, 1, 1]),
            helper.make_node("AveragePool", ["x"], ["b"], name="pool_including_pad", kernel_shape=[3, 2],
                             strides=[2, 1], pads=[1, 0, 2, 1], count_include_pad=1, ceil_mode=1),
            helper.make_node("AveragePool", ["b"], ["y"], name="pool_valid", kernel_shape=[2, 3])],
         {"x": smooth}, []),
        ("globalaveragepool", [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], {"x": smooth}, []),
        ("globalaveragepool_specials", [helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")], {"x": x}, []),
        ("batchnorm_hard", [
            helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["a"], name="bn", epsilon=1e-3),
            helper.make_node("HardSigmoid", ["a"], ["b"], name="hardsigmoid", alpha=0.3, beta=0.6),
            helper.make_node("HardSwish", ["a"], ["c"], name="hardswish"),
            helper.make_node("HardSigmoid", ["c"], ["y"], name="hardsigmoid_default")],
         {"x": x}, [weight(rng, "s", (4,)), weight(rng, "bb", (4,)), weight(rng, "m", (4,)),
                    numpy_helper.from_array(rng.uniform(0, 2, 4).astype(np.float32), "v")]),
        ("sigmoid_softmax", [
            helper.make_node("Sigmoid", ["x"], ["a"], name="sigmoid"),
            helper.make_node("Softmax", ["x"], ["b"], name="softmax_last"),
            helper.make_node("Softmax", ["b"], ["c"], name="softmax_channels", axis=1),
            helper.make_node("Add", ["a", "c"], ["y"], name="add")],
         {"x": x * np.float32(4)}, []),
    ]


def test_softmax_before_opset_13_coerces_to_2d(sealverify: Path, tmp_path: Path) -> None:
    x = hard_values(np.random.default_rng(5), (2, 3, 4, 5), specials=False)
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=2)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    container, log, npz = tmp_path / "m.seal", tmp_path / "m.jsonl", tmp_path / "m.npz"
    seal_model(make_model(nodes, inputs, outputs, opset=11), container)
    audited_run(Session(str(container)), {"x": x}, audit=log)
    np.savez(npz, x=x)
    done = subprocess.run([str(sealverify), "replay", str(log), "--container", str(container), "--inputs", str(npz)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def replay_cases(sealverify: Path, tmp_path: Path, cases: Callable[[np.random.Generator], list[Case]]) -> set[str]:
    """Replays every case on two seeds, each bit-identical; returns the operators covered."""
    covered: set[str] = set()
    for seed in range(2):
        for name, nodes, feeds, weights in cases(np.random.default_rng(seed)):
            out = replay(sealverify, tmp_path, f"{name}{seed}", nodes, feeds, weights)
            assert f"bit-identical: {len(nodes)} step(s)" in out
            covered |= {n.op_type for n in nodes}
    return covered


def test_stage_b_operators_replay_bit_identical(sealverify: Path, tmp_path: Path) -> None:
    assert replay_cases(sealverify, tmp_path, stage_b_cases) >= STAGE_B_OPERATORS


def test_the_demo_classifier_replays_bit_identical(sealverify: Path, tmp_path: Path) -> None:
    """The MobileNetV3-style classifier of the demo (115 steps: Conv, BatchNormalization, HardSwish,
    GlobalAveragePool, Softmax, the shape subgraph) on its real input."""
    material = zoo.model("mobilenetv3-orientation")
    path = require_material(lambda: zoo.locate(material.package, material.path_in_package))
    container, log, npz = tmp_path / "demo.seal", tmp_path / "demo.jsonl", tmp_path / "demo.npz"
    seal_model(onnx.load(str(path)), container)
    feeds = material.make_inputs()
    audited_run(Session(str(container)), feeds, audit=log)
    np.savez(npz, **feeds)
    done = subprocess.run([str(sealverify), "replay", str(log), "--container", str(container), "--inputs", str(npz)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "bit-identical: 115 step(s)" in done.stdout
