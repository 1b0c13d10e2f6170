"""The torch bridge against ONNX Runtime and its peers (onnx2torch, onnx2pytorch), in one run.

1. Node cases: ONNX's backend node test cases, regenerated from the installed onnx, converted and
   run by each converter and compared with the expected outputs exactly as ``sealtrace
   conformance`` compares them (dtype, shape, values with each case's tolerances). Counted: the
   reference interpreter, the torch bridge (its torch backend step by step, and its fx module),
   onnx2torch 1.5.15 and onnx2pytorch 0.6.0. A case a peer cannot convert counts as unsupported.
2. Forward latency: median seconds per run, interleaved round by round in one process (the
   machine's noise hits all alike; the order shuffled every round) after one warm-up run each, every runtime on the same number
   of intra-op threads (``--threads``, default 1): ONNX Runtime (all graph optimizations), the
   torch bridge's fx module under ``torch.no_grad`` and its torch backend, and each peer's module
   under ``torch.no_grad``; on the real models (sealtrace.zoo) and on three models built with
   torch and exported with ``torch.onnx.export`` (random weights): 2-layer bidirectional LSTM, GRU
   and RNN, a ConvNeXt-style and a MobileNetV2-style network. Every runtime's outputs are checked against
   the reference backend first; a runtime that fails, or disagrees beyond 1e-3 (relative to the
   output's magnitude), gets no time.

The peers are measured when they import (``pip install --no-deps onnx2torch==1.5.15
onnx2pytorch==0.6.0``). Both import torchvision for a few operators (NMS, RoiAlign, DeformConv,
ImageDecoder); where torchvision is not installed (PyPI has no build of it for a CPU-only torch
2.13), they get a stand-in module whose functions raise, so those operators fail for them.

    python benchmarks/bench_torch.py [--threads 1] [--repeats 15] [--budget 20] [--models a,b] [--no-cases]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import signal
import statistics
import sys
import tempfile
import time
import types
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PEERS = ("onnx2torch", "onnx2pytorch")
SYNTHETIC = ("bilstm-2x", "bigru-2x", "birnn-2x", "convnext-style", "mobilenet-style")


# ---------------------------------------------------------------------------------------------
# the peers


def _stand_in_torchvision() -> None:
    """A torchvision module whose operators raise, for peers that import it (see the docstring)."""
    try:
        import torchvision  # noqa: F401
        return
    except Exception:  # not installed, or a build that does not load with this torch
        pass

    def missing(*_args: Any, **_kwargs: Any) -> Any:
        raise NotImplementedError("torchvision is not installed")

    root, ops, tv_io = (types.ModuleType(n) for n in ("torchvision", "torchvision.ops", "torchvision.io"))
    for name in ("nms", "batched_nms", "roi_align", "roi_pool", "deform_conv2d"):
        setattr(ops, name, missing)
    tv_io.decode_image = missing  # type: ignore[attr-defined]
    tv_io.ImageReadMode = types.SimpleNamespace(UNCHANGED=0, GRAY=1, RGB=3)  # type: ignore[attr-defined]
    root.ops, root.io = ops, tv_io  # type: ignore[attr-defined]
    sys.modules.update({"torchvision": root, "torchvision.ops": ops, "torchvision.io": tv_io})


_TORCHVISION_NOTE = {
    "installed": "torchvision installed",
    "stand-in": "no torchvision: a stand-in whose NMS, RoiAlign, DeformConv and ImageDecoder raise",
}


def _torchvision_state() -> str:
    module = sys.modules.get("torchvision")
    return "installed" if module is not None and getattr(module, "__file__", None) else "stand-in"


def available_peers() -> dict[str, str]:
    """Each importable peer with its version."""
    _stand_in_torchvision()
    found = {}
    for name in PEERS:
        try:
            with _quiet():
                module = __import__(name)
        except Exception as exc:  # not installed: measured without it
            print(f"{name}: not measured ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        from importlib.metadata import version

        found[name] = getattr(module, "__version__", None) or version(name)
    return found


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Peers print and warn freely while converting; none of it belongs in the benchmark's output."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def convert_with(peer: str, model: Any) -> Callable[..., Any]:
    """The peer's torch module for ``model`` (a copy: a converter may change what it is given)."""
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    with _quiet():
        if peer == "onnx2torch":
            import onnx2torch

            return onnx2torch.convert(copy)
        import onnx2pytorch

        return onnx2pytorch.ConvertModel(copy)


def graph_input_names(model: Any) -> list[str]:
    initializers = {t.name for t in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


def torch_value(value: Any) -> Any:
    """A NumPy value as the torch modules take it: tensors; strings stay NumPy; sequences lists."""
    import numpy as np

    from sealtrace.torchops.dtypes import from_numpy
    from sealtrace.torchops.reference_step import is_string_array

    if isinstance(value, list):
        return [torch_value(v) for v in value]
    if value is None or is_string_array(value) or isinstance(value, dict):
        return value
    return from_numpy(np.asarray(value))


def numpy_value(value: Any) -> Any:
    import numpy as np

    from sealtrace.torchops.dtypes import to_numpy

    if isinstance(value, (list, tuple)):
        return [numpy_value(v) for v in value]
    value = to_numpy(value)
    if isinstance(value, (bool, int, float)):
        return np.asarray(value)
    return value


def outputs_of(result: Any, count: int) -> list[Any]:
    """A module's result as one value per graph output (a single output may itself be a list)."""
    if count == 1:
        return [numpy_value(result)]
    return [numpy_value(r) for r in result]


# ---------------------------------------------------------------------------------------------
# 1. node cases


class _TimeoutError(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expire(_signum: int, _frame: Any) -> None:
        raise _TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def peer_runner(peer: str) -> Callable[[Any], Any]:
    """run_case's factory for a peer: a conversion failure is 'unsupported'."""
    from sealtrace.errors import UnsupportedError

    def prepare(model: Any) -> Any:
        try:
            with _time_limit(30):
                module = convert_with(peer, model)
        except Exception as exc:
            raise UnsupportedError([f"{peer}: {type(exc).__name__}: {str(exc)[:200]}"]) from None
        names = graph_input_names(model)

        def run(_model: Any, inputs: list[Any]) -> list[Any]:
            feeds = [torch_value(v) for v in inputs[: len(names)]]
            with _time_limit(30), torch.no_grad(), _quiet():
                result = module(*feeds)
            return outputs_of(result, len(model.graph.output))

        return run

    return prepare


def module_runner() -> Callable[[Any], Any]:
    """run_case's factory for the torch bridge's fx module."""
    from sealtrace.plan import build_plan
    from sealtrace.torchbridge import to_torch
    from sealtrace.torchops.steps import check_supported

    def prepare(model: Any) -> Any:
        plan = build_plan(model)
        check_supported(plan)
        module = to_torch(plan)

        def run(_model: Any, inputs: list[Any]) -> list[Any]:
            feeds = dict(zip(plan.input_names, inputs, strict=False))
            with torch.no_grad():
                result = module(*(torch_value(feeds[n]) for n in module.input_names))
            return outputs_of(result, len(plan.output_names))

        return run

    return prepare


def count_cases(peers: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per runtime, how many node cases passed / failed / were unsupported."""
    from collections import Counter

    from sealtrace.conformance.exclusions import excluded_cases
    from sealtrace.conformance.runner import collect_cases, reference_runner, run_case, torch_runner

    cases = collect_cases(None)
    factories: dict[str, Callable[[], Any]] = {
        "reference": reference_runner,
        "torch bridge (backend)": torch_runner,
        "torch bridge (fx module)": module_runner,
        **{peer: (lambda p=peer: peer_runner(p)) for peer in peers},
    }
    # The reference and the torch bridge document the cases they do not claim (conformance_exclusions);
    # the peers document none.
    excluded = {"reference": excluded_cases("reference"), "torch bridge (backend)": excluded_cases("torch"),
                "torch bridge (fx module)": excluded_cases("torch")}
    counts = {}
    for name, factory in factories.items():
        start = time.perf_counter()
        prepare = factory()
        skip = excluded.get(name, {})
        totals = Counter("excluded" if case.name in skip else run_case(case, prepare).status for case in cases)
        counts[name] = {k: totals.get(k, 0) for k in ("passed", "failed", "unsupported", "excluded")}
        print(f"{name}: {counts[name]} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    return counts


def cases_table(counts: dict[str, dict[str, int]], total: int) -> str:
    lines = [f"| runtime | passed (of {total}) | failed | not converted / unsupported | documented exclusions |",
             "|---|---:|---:|---:|---:|"]
    for name, c in counts.items():
        lines.append(f"| {name} | {c['passed']} | {c['failed']} | {c['unsupported']} | {c['excluded']} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# 2. forward latency


def synthetic_model(key: str, directory: Path) -> tuple[str, str, dict[str, Any]]:
    """(key, path, inputs) of a model built with torch and exported with torch.onnx.export."""
    import numpy as np

    torch.manual_seed(0)
    if key in ("bilstm-2x", "bigru-2x", "birnn-2x"):
        model: nn.Module = _Recurrent({"bilstm-2x": nn.LSTM, "bigru-2x": nn.GRU, "birnn-2x": nn.RNN}[key])
        x = torch.randn(50, 4, 64)  # [time, batch, features]
    elif key == "convnext-style":
        model = _ConvNeXt()
        x = torch.randn(1, 3, 128, 128)
    else:
        model = _MobileNet()
        x = torch.randn(1, 3, 160, 160)
    for module in model.modules():  # random running statistics, so BatchNorm is not the identity
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    model.eval()
    path = directory / f"{key}.onnx"
    with _quiet():
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"])
    return key, str(path), {"x": np.ascontiguousarray(x.numpy())}


class _Recurrent(nn.Module):
    """Two stacked bidirectional recurrent layers (64 features in, 128 hidden): nn.LSTM, nn.GRU or nn.RNN."""

    def __init__(self, kind: type[nn.Module]) -> None:
        super().__init__()
        self.layers = kind(64, 128, num_layers=2, bidirectional=True)

    def forward(self, x: Any) -> Any:
        return self.layers(x)[0]


class _ConvNeXtBlock(nn.Module):
    """Depthwise 7x7, LayerNorm over channels, 4x pointwise MLP with GELU, layer scale, residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1, self.act, self.pw2 = nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(0.1 * torch.ones(dim))

    def forward(self, x: Any) -> Any:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(self.act(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class _ChannelsNorm(nn.LayerNorm):
    def forward(self, x: Any) -> Any:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _ConvNeXt(nn.Module):
    """A small ConvNeXt: stages of 32/64/128/256 channels, depths 1/1/3/1, 10 classes."""

    def __init__(self, dims: tuple[int, ...] = (32, 64, 128, 256), depths: tuple[int, ...] = (1, 1, 3, 1)) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, stride=4), _ChannelsNorm(dims[0], eps=1e-6)]
        for i, (dim, depth) in enumerate(zip(dims, depths, strict=True)):
            if i:
                layers += [_ChannelsNorm(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, stride=2)]
            layers += [_ConvNeXtBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(dims[-1], 10)

    def forward(self, x: Any) -> Any:
        return self.head(self.features(x).mean((2, 3)))


class _Inverted(nn.Module):
    """MobileNetV2's inverted residual: 1x1 expand, 3x3 depthwise, 1x1 project (BatchNorm, ReLU6)."""

    def __init__(self, i: int, o: int, stride: int, expand: int) -> None:
        super().__init__()
        h = i * expand
        self.block = nn.Sequential(
            nn.Conv2d(i, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, stride, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, o, 1, bias=False), nn.BatchNorm2d(o))
        self.residual = stride == 1 and i == o

    def forward(self, x: Any) -> Any:
        return x + self.block(x) if self.residual else self.block(x)


class _MobileNet(nn.Module):
    """A MobileNetV2 at half width, 10 classes."""

    def __init__(self) -> None:
        super().__init__()
        stages = [(16, 1, 1, 1), (24, 2, 2, 6), (32, 3, 2, 6), (64, 2, 2, 6), (96, 2, 1, 6), (160, 2, 2, 6)]
        layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6()]
        channels = 16
        for out, count, stride, expand in stages:
            for k in range(count):
                layers.append(_Inverted(channels, out, stride if k == 0 else 1, expand))
                channels = out
        layers += [nn.Conv2d(channels, 640, 1, bias=False), nn.BatchNorm2d(640), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(640, 10)

    def forward(self, x: Any) -> Any:
        return self.head(self.features(x).mean((2, 3)))


def runners(path: str, feeds: dict[str, Any], threads: int, peers: dict[str, str]
            ) -> tuple[dict[str, Callable[[], Any]], dict[str, str]]:
    """One zero-argument callable per runtime that converts and agrees with the reference; and
    for the others, why they are left out."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from sealtrace.backends.reference import ReferenceBackend
    from sealtrace.backends.torch import TorchBackend
    from sealtrace.plan import build_plan
    from sealtrace.plan.feeds import check_feeds
    from sealtrace.torchbridge import to_torch

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    plan = build_plan(path)
    checked = check_feeds(plan, feeds)
    expected = ReferenceBackend().run(plan, checked)
    module = to_torch(plan)
    args = [torch.from_numpy(np.ascontiguousarray(checked[n])) for n in module.input_names]
    backend = TorchBackend(threads=threads)

    def call_module(m: Any, values: list[Any]) -> Callable[[], Any]:
        def run() -> Any:
            with torch.no_grad():
                return m(*values)

        return run

    candidates: dict[str, Callable[[], Any]] = {
        "onnxruntime": lambda: session.run(None, feeds),
        "torch module": call_module(module, args),
        "torch backend": lambda: backend.run(plan, checked),
    }
    left_out: dict[str, str] = {}
    model = onnx.load(path)
    for peer in peers:
        try:
            converted = convert_with(peer, model)
        except Exception as exc:
            left_out[peer] = f"does not convert ({type(exc).__name__})"
            continue
        values = [torch.from_numpy(np.ascontiguousarray(checked[n])) for n in graph_input_names(model)]
        candidates[peer] = call_module(converted, values)
    calls = {}
    for name, call in candidates.items():
        try:
            with _quiet():
                result = call()
        except Exception as exc:
            left_out[name] = f"fails to run ({type(exc).__name__})"
            continue
        got = result if name in ("onnxruntime", "torch backend") else outputs_of(result, len(plan.output_names))
        if isinstance(got, dict):
            got = [got[n] for n in plan.output_names]
        worst = max(_relative_error(g, expected[n]) for g, n in zip(got, plan.output_names, strict=True))
        if worst > 1e-3:
            left_out[name] = f"disagrees with the reference ({worst:.1e})"
            continue
        calls[name] = call
    return calls, left_out


def _relative_error(got: Any, want: Any) -> float:
    import numpy as np

    a = np.asarray(got, dtype=np.float64).reshape(-1)
    b = np.asarray(want, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        return float("inf")
    if not a.size:
        return 0.0
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def measure(path: str, feeds: dict[str, Any], threads: int, repeats: int, budget_s: float,
            peers: dict[str, str]) -> tuple[dict[str, float], dict[str, str]]:
    """Median seconds per run of each runtime, interleaved round by round."""
    torch.set_num_threads(threads)
    calls, left_out = runners(path, feeds, threads, peers)
    for call in calls.values():
        call()  # warm-up: first-run allocations, lazy initialization
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    shuffle = random.Random(0).shuffle  # a new order each round: no runtime always follows the same one
    start = time.perf_counter()
    for _ in range(repeats):
        shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s and len(next(iter(times.values()))) >= 3:
            break
    return {name: statistics.median(values) for name, values in times.items()}, left_out


def latency_table(rows: list[tuple[str, dict[str, float], dict[str, str]]], peers: dict[str, str]) -> str:
    columns = ["onnxruntime", "torch module", "torch backend", *peers]
    lines = ["| model | " + " | ".join(f"{c} (ms)" for c in columns) + " | module / ORT | module / fastest peer |",
             "|---|" + "---:|" * (len(columns) + 2)]
    notes = []
    for key, m, left_out in rows:
        cells = []
        for c in columns:
            if c in m:
                cells.append(f"{1e3 * m[c]:.2f}")
            else:
                cells.append("-")
                if c in left_out:
                    notes.append(f"{key}: {c} {left_out[c]}")
        module = m.get("torch module")
        ort_ratio = f"{module / m['onnxruntime']:.2f}x" if module and "onnxruntime" in m else "-"
        peer_times = [m[p] for p in peers if p in m]
        peer_ratio = f"{module / min(peer_times):.2f}x" if module and peer_times else "-"
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {ort_ratio} | {peer_ratio} |")
    text = "\n".join(lines)
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads for every runtime")
    parser.add_argument("--repeats", type=int, default=15, help="rounds at most")
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of timed rounds per model at most")
    parser.add_argument("--models", default=None,
                        help=f"comma-separated keys (default: all real models + acasxu + {', '.join(SYNTHETIC)})")
    parser.add_argument("--no-cases", action="store_true", help="skip the node-case counts")
    parser.add_argument("--out", default=str(HERE / "results" / "torch.md"))
    args = parser.parse_args()
    from material import require
    from sealtrace import zoo

    wanted = args.models.split(",") if args.models else None
    real = None if wanted is None else [k for k in wanted if k not in SYNTHETIC]
    require("bench_torch", Path(args.out), real)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    peers = available_peers()
    sections = []
    from sealtrace.conformance.runner import collect_cases

    if not args.no_cases:
        counts = count_cases(peers)
        sections.append("### ONNX node test cases\n\n" + cases_table(counts, len(collect_cases(None))))
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        cases = zoo.benchmark_cases(real) if real is None or real else []
        cases += [synthetic_model(k, Path(directory)) for k in SYNTHETIC if wanted is None or k in wanted]
        for key, path, feeds in cases:
            result, left_out = measure(path, feeds, args.threads, args.repeats, args.budget, peers)
            rows.append((key, result, left_out))
            print(f"{key}: " + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in result.items())
                  + "".join(f"; {k} {why}" for k, why in left_out.items()), file=sys.stderr, flush=True)
    sections.append("### Forward latency\n\n" + latency_table(rows, peers))
    from machine import machine_facts

    facts = machine_facts()
    peer_versions = ", ".join(f"{k} {v}" for k, v in peers.items()) or "none installed"
    text = (
        "## Torch bridge: node cases and latency against ONNX Runtime and the peers\n\n"
        f"`python benchmarks/bench_torch.py --threads {args.threads}`: one run; latency is the median of up to "
        f"{args.repeats} interleaved rounds, {args.threads} intra-op thread(s) for every runtime, CPU.\n"
        f"Machine: {facts.get('cpu')} ({facts.get('cores')} cores), onnxruntime {facts.get('onnxruntime')}, "
        f"torch {torch.__version__}, peers: {peer_versions} (`pip install --no-deps`; "
        f"{_TORCHVISION_NOTE[_torchvision_state()]}).\n\n" + "\n\n".join(sections) + "\n"
    )
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
