"""all-MiniLM-L6-v2 in float32, for sealverify's stage (c) (issue 30): the only MiniLM at hand is the int8 one
(``zoo.model("minilm-int8")``), so its weights are dequantized (scale * q; the int8 model's quantization is
symmetric, without a zero point) into a small PyTorch module of BERT's architecture, which torch's dynamo
exporter writes as ONNX. The export is cached in .testmodels/ under the int8 model's digest and torch's version;
it is never part of the repository.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
from functools import cache
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from sealtrace import zoo
from sealtrace.zoo import MaterialMissingError

HIDDEN, HEADS, LAYERS, INTERMEDIATE = 384, 12, 6, 1536
_CACHE = Path(__file__).resolve().parents[2] / ".testmodels" / "minilm-fp32"


def _int8_weights() -> dict[str, np.ndarray]:
    """The int8 model's weights in float32 under BERT's parameter names (``embeddings.word_embeddings.weight``,
    ``encoder.layer.0.attention.self.query.weight`` ...): every quantized tensor is scale * q, a MatMul's
    weight named after the bias its output is added to (and transposed back to torch's [out, in])."""
    graph = onnx.load(str(zoo.model("minilm-int8").path)).graph
    stored = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    values = dict(stored)
    for name, q in stored.items():
        if name.endswith("_q"):
            base = name[: -len("_q")]
            values[base] = (q.astype(np.float32) * stored[f"{base}_scale"]).astype(np.float32)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    weights = {name.removeprefix("inner."): v for name, v in values.items()
               if name.startswith("inner.") and not name.endswith(("_q", "_scale", "_f"))}
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in values and node.input[1] + "_q" in stored:
            (add,) = [c for c in consumers[node.output[0]] if c.op_type == "Add"]
            bias = next(name for name in add.input if name.endswith(".bias"))
            weights[bias.removeprefix("inner.").removesuffix(".bias") + ".weight"] = values[node.input[1]].T.copy()
    return weights


def _module(weights: dict[str, np.ndarray]):  # type: ignore[no-untyped-def]
    """BERT's encoder as all-MiniLM-L6-v2 has it: 6 layers, hidden 384, 12 heads, GELU (erf), LayerNorm eps
    1e-12; its output is the last hidden state (the int8 model's, which has no pooling)."""
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value = nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, HIDDEN), nn.Linear(HIDDEN, HIDDEN)
            self.attention_dense, self.attention_norm = nn.Linear(HIDDEN, HIDDEN), nn.LayerNorm(HIDDEN, eps=1e-12)
            self.intermediate, self.output = nn.Linear(HIDDEN, INTERMEDIATE), nn.Linear(INTERMEDIATE, HIDDEN)
            self.output_norm = nn.LayerNorm(HIDDEN, eps=1e-12)

        def heads(self, x: torch.Tensor) -> torch.Tensor:
            return x.view(x.shape[0], x.shape[1], HEADS, HIDDEN // HEADS).transpose(1, 2)

        def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
            q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
            scores = q @ k.transpose(-1, -2) / math.sqrt(HIDDEN // HEADS) + mask_bias
            context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(x.shape)
            x = self.attention_norm(self.attention_dense(context) + x)
            hidden = nn.functional.gelu(self.intermediate(x))
            return self.output_norm(self.output(hidden) + x)

    class MiniLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Embedding(*weights["embeddings.word_embeddings.weight"].shape)
            self.position = nn.Embedding(*weights["embeddings.position_embeddings.weight"].shape)
            self.token_type = nn.Embedding(*weights["embeddings.token_type_embeddings.weight"].shape)
            self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            positions = torch.arange(input_ids.shape[1], dtype=torch.int64)
            x = self.norm(self.word(input_ids) + self.token_type(token_type_ids) + self.position(positions))
            mask_bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
            for layer in self.layers:
                x = layer(x, mask_bias)
            return x

    names = {"word.weight": "embeddings.word_embeddings.weight",
             "position.weight": "embeddings.position_embeddings.weight",
             "token_type.weight": "embeddings.token_type_embeddings.weight",
             "norm.weight": "embeddings.LayerNorm.weight", "norm.bias": "embeddings.LayerNorm.bias"}
    parts = {"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
             "attention_dense": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
             "intermediate": "intermediate.dense", "output": "output.dense", "output_norm": "output.LayerNorm"}
    for layer in range(LAYERS):
        for ours, bert in parts.items():
            for kind in ("weight", "bias"):
                names[f"layers.{layer}.{ours}.{kind}"] = f"encoder.layer.{layer}.{bert}.{kind}"
    module = MiniLM().eval()
    module.load_state_dict({ours: torch.from_numpy(weights[bert]) for ours, bert in names.items()})
    return module


def _export(path: Path) -> None:
    import torch

    module = _module(_int8_weights())
    example = {k: torch.from_numpy(v) for k, v in zoo.model("minilm-int8").inputs().items()}
    batch, sequence = torch.export.Dim("batch", max=64), torch.export.Dim("sequence", max=512)
    dynamic = {name: {0: batch, 1: sequence} for name in example}
    program = torch.onnx.export(module, (), kwargs=example, dynamo=True, dynamic_shapes=dynamic,
                                opset_version=18, verbose=False)
    model = program.model_proto
    model.ir_version = min(model.ir_version, 10)  # onnxruntime 1.2x reads IR 10
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_suffix(".partial")
    onnx.save(model, str(scratch))
    scratch.replace(path)


@cache
def minilm_fp32_path() -> Path:
    """The float32 all-MiniLM-L6-v2 (built on first use, then cached in .testmodels/minilm-fp32/)."""
    int8 = zoo.model("minilm-int8").path
    for needed in ("torch", "onnxscript"):
        if importlib.util.find_spec(needed) is None:
            raise MaterialMissingError(f"the float32 MiniLM is exported with torch's dynamo exporter: {needed} is not installed")
    import torch

    key = hashlib.sha256(int8.read_bytes() + torch.__version__.encode()).hexdigest()[:16]
    path = _CACHE / f"all-minilm-l6-v2-fp32-{key}.onnx"
    if not path.is_file():
        _export(path)
    return path

