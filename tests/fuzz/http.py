"""The fuzz suite's HTTP reader: generated Open Inference Protocol bodies against a live server.

`sealtrace serve --audit io` runs as a child process on 127.0.0.1 over three small models (an MLP
``tiny``, Identity over four datatypes ``typed``, Identity over any two axes ``any2d``), and one
client sends it bounded bodies that hypothesis makes from well-formed requests and then breaks: JSON
and binary, wrong names, datatypes, shapes (empty, huge, negative), data that does not match,
NaN, duplicate keys, lone surrogates, unknown parameters, header lengths that lie, truncation.

The invariant, for every request: a 200 or a 4xx with an ``{"error": ...}`` body, never a 5xx or no
answer; the ledger holds exactly one record per 200 (a refused request appends nothing); the server
answers health throughout; its resident memory grows by at most ``RSS_ALLOWANCE`` over the run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from sealtrace.container import seal_model
from sealtrace.signing import generate_keypair

ROOT = Path(__file__).resolve().parents[2]
# Growth of the server's resident memory from after its warm-up to the end: the bodies are at most
# MAX_BODY bytes and the memory budget SERVER_BUDGET, so anything near this is a leak or an
# allocation a declared size did not bound.
RSS_ALLOWANCE = 256 << 20
SERVER_BUDGET = "64MiB"
MAX_BODY = 1 << 20
ANSWER_TIMEOUT_S = 30
WARM_UP = 50  # requests before the memory baseline is taken

# What the served models take (docs of tests/serve/conftest.py): name -> [(input, datatype, rank)].
MODELS: dict[str, list[tuple[str, str, int]]] = {
    "tiny": [("x", "FP32", 2)],
    "typed": [("i", "INT64", 1), ("flag", "BOOL", 1), ("text", "BYTES", 1), ("half", "FP16", 1)],
    "any2d": [("x", "FP32", 2)],
}
DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32",
             "FP64", "BYTES", "BF16")
_NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
          "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
          "FP32": np.float32, "FP64": np.float64, "BF16": np.uint16}


@dataclass(frozen=True)
class Request:
    model: str
    body: bytes
    headers: dict[str, str]


@dataclass
class HttpTally:
    """What a run did: answers by status, the violations (with the request), memory, health checks."""

    statuses: Counter[int] = field(default_factory=Counter)
    violations: list[tuple[str, Request]] = field(default_factory=list)
    rss_baseline: int = 0  # the server's peak resident size after the warm-up
    rss_peak: int = 0  # and at the end
    health_checks: int = 0

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())

    @property
    def rss_growth(self) -> int:
        return max(0, self.rss_peak - self.rss_baseline)


# -- the bodies ---------------------------------------------------------------------------------------
_dims = st.one_of(st.integers(0, 4), st.sampled_from([0, 1, 7, 1 << 31, 1 << 40, 1 << 48, 1 << 62, (1 << 63) - 1, -1]))
_texts = st.one_of(st.text(max_size=8), st.sampled_from(["x", "i", "flag", "text", "half", "\ud800", "a\udfffb", ""]))
_numbers = st.one_of(st.integers(-(1 << 65), 1 << 65), st.floats(allow_nan=True, allow_infinity=True), st.booleans())
_scalars = st.one_of(_numbers, st.text(max_size=4), st.none())


@st.composite
def _tensor(draw: st.DrawFn, name: str, datatype: str, rank: int, binary: bool) -> tuple[dict[str, Any], bytes]:
    """One input: usually what the model declares, sometimes not, with data that may not fit."""
    name = draw(st.one_of(st.just(name), _texts)) if draw(st.integers(0, 9)) == 0 else name
    datatype = draw(st.sampled_from(DATATYPES)) if draw(st.integers(0, 5)) == 0 else datatype
    shape = draw(st.lists(_dims, min_size=rank, max_size=rank)) if draw(st.booleans()) else \
        draw(st.lists(st.integers(0, 3), min_size=rank, max_size=rank))
    if draw(st.integers(0, 9)) == 0:
        shape = draw(st.lists(_dims, max_size=5))
    count = math.prod(max(0, d) for d in shape)
    fits = count <= 64 and all(d <= 64 for d in shape)
    if not fits:  # a huge declared shape: the data stays a few elements (the body is bounded)
        count = draw(st.integers(0, 4))
    tensor: dict[str, Any] = {"name": name, "shape": shape, "datatype": datatype}
    blob = b""
    if binary:
        if datatype == "BYTES":
            items = draw(st.lists(st.binary(max_size=6), min_size=count, max_size=count))
            blob = b"".join(len(item).to_bytes(4, "little") + item for item in items)
        else:
            itemsize = np.dtype(_NUMPY.get(datatype, np.uint8)).itemsize
            blob = draw(st.binary(min_size=count * itemsize, max_size=count * itemsize))
        if draw(st.integers(0, 6)) == 0:
            blob = blob[: draw(st.integers(0, len(blob)))] + draw(st.binary(max_size=3))
        size: Any = len(blob) if draw(st.integers(0, 6)) else draw(st.one_of(st.integers(-2, 1 << 40), _scalars))
        tensor["parameters"] = {"binary_data_size": size}
    else:
        element = {"BYTES": st.text(max_size=6), "BOOL": st.booleans(), "FP16": st.floats(width=16),
                   "FP32": st.floats(width=32), "FP64": st.floats()}.get(datatype, st.integers(-300, 300))
        data: Any = draw(st.lists(element, min_size=count, max_size=count))
        if draw(st.integers(0, 5)) == 0:
            data = draw(st.one_of(st.lists(_scalars, max_size=6), st.recursive(_scalars, st.lists, max_leaves=6)))
        elif fits and len(shape) == 2 and shape[0] and draw(st.booleans()):
            row = len(data) // shape[0]
            data = [data[r * row : (r + 1) * row] for r in range(shape[0])]  # nested to the shape
        tensor["data"] = data
    if draw(st.integers(0, 12)) == 0:
        tensor[draw(st.sampled_from(["extra", "parameters", "data"]))] = draw(_scalars)
    return tensor, blob


@st.composite
def requests(draw: st.DrawFn) -> Request:
    """One request to one of MODELS (or an unknown one), JSON or binary, perhaps broken."""
    model = draw(st.sampled_from([*MODELS, "nope"]))
    binary = draw(st.booleans())
    document: dict[str, Any] = {}
    if draw(st.booleans()):
        document["id"] = draw(_texts)
    inputs, blobs = [], []
    for name, datatype, rank in MODELS.get(model, MODELS["tiny"]):
        if draw(st.integers(0, 15)) == 0:
            continue  # a missing input
        tensor, blob = draw(_tensor(name, datatype, rank, binary and datatype != "BF16"))
        inputs.append(tensor)
        blobs.append(blob)
    document["inputs"] = inputs
    if draw(st.integers(0, 5)) == 0:
        document["parameters"] = draw(st.dictionaries(
            st.sampled_from(["binary_data_output", "sequence_id", "priority", "timeout", "other"]), _scalars,
            max_size=2))
    if draw(st.integers(0, 5)) == 0:
        document["outputs"] = [{"name": draw(st.sampled_from(["y", "y_out", "i_out", "zz"])),
                                "parameters": {"binary_data": draw(st.one_of(st.booleans(), _scalars))}}]
    header = json.dumps(document, allow_nan=True).encode("utf-8", "surrogatepass")
    mutation = draw(st.integers(0, 9))
    if mutation == 0:  # a key given twice
        header = b'{"inputs": [], ' + header[1:] if header.startswith(b"{") else header
    elif mutation == 1:  # cut short
        header = header[: draw(st.integers(0, len(header)))]
    elif mutation == 2 and header:  # one byte changed
        at = draw(st.integers(0, len(header) - 1))
        header = header[:at] + bytes([draw(st.integers(0, 255))]) + header[at + 1 :]
    headers = {"Content-Type": "application/json"}
    body = header
    if binary:
        body = header + b"".join(blobs)
        length = len(header) if draw(st.integers(0, 6)) else draw(st.integers(-1, len(body) + 2))
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(length)}
    return Request(model, body[:MAX_BODY], headers)


# -- the server ---------------------------------------------------------------------------------------
def make_models(folder: Path) -> tuple[list[Path], tuple[Path, Path]]:
    """The three containers of MODELS, sealed and signed, and the (private, public) key."""
    from onnx import TensorProto, helper

    from tests.conftest import make_model, mlp_model
    from tests.serve.conftest import typed_model

    keys = generate_keypair(folder / "key.pem")
    any2d = make_model([helper.make_node("Identity", ["x"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B"])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["A", "B"])], name="any2d")
    paths = []
    for name, model in (("tiny", mlp_model(batch="N")), ("typed", typed_model()), ("any2d", any2d)):
        paths.append(folder / f"{name}.seal")
        seal_model(model, paths[-1], sign_with=keys[0])
    return paths, keys


@contextlib.contextmanager
def live_server(folder: Path) -> Iterator[tuple[str, int, Path]]:
    """`sealtrace serve --audit io` over make_models' containers: (URL, pid, ledger path)."""
    containers, keys = make_models(folder)
    ledger = folder / "ledger.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]), "OPENBLAS_NUM_THREADS": "1",
           "SEALTRACE_MEMORY_BUDGET": SERVER_BUDGET}
    command = [sys.executable, "-m", "sealtrace", "serve", *map(str, containers), "--ledger", str(ledger),
               "--trust", str(keys[1]), "--sign", str(keys[0]), "--audit", "io", "--port", "0",
               "--max-body", str(MAX_BODY), "--log-level", "warning"]
    child = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    assert child.stderr is not None
    try:
        deadline = time.monotonic() + 120
        url = None
        while url is None and time.monotonic() < deadline:
            line = child.stderr.readline()
            if not line:
                raise AssertionError(f"the server did not start (exit {child.wait()})")
            found = re.search(r"serving on (http://\S+)", line)
            url = found.group(1) if found else None
        assert url is not None, "the server did not start in time"
        threading.Thread(target=child.stderr.read, daemon=True).start()  # keep the pipe drained
        yield url, child.pid, ledger
    finally:
        child.terminate()
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _peak_rss(pid: int) -> int:
    """The process's peak resident size so far (VmHWM), in bytes: transient spikes count."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    return 0


def _ledger_records(client: httpx.Client) -> int:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("sealtrace_ledger_records "):
            return int(float(line.split()[1]))
    raise AssertionError("no sealtrace_ledger_records in /metrics")


def fuzz_http(url: str, pid: int, examples: int, random_seed: int = 0, check_every: int = 1) -> HttpTally:
    """Send ``examples`` generated requests and check the invariant (records and health every
    ``check_every`` requests, memory at the same points)."""
    tally = HttpTally()
    records = 0

    with httpx.Client(base_url=url, timeout=ANSWER_TIMEOUT_S) as client:
        records = _ledger_records(client)

        @seed(random_seed)
        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(request=requests())
        def send(request: Request) -> None:
            nonlocal records
            try:
                response = client.post(f"/v2/models/{request.model}/infer", content=request.body,
                                       headers=request.headers)
            except httpx.HTTPError as exc:
                tally.violations.append((f"no answer: {type(exc).__name__}: {exc}", request))
                return
            tally.statuses[response.status_code] += 1
            if response.status_code == 200:
                records += 1
            elif response.status_code >= 500 or response.status_code < 400:
                tally.violations.append((f"status {response.status_code}: {response.text[:200]}", request))
            else:
                try:
                    error = response.json()["error"]
                    assert isinstance(error, str) and error
                except (ValueError, KeyError, TypeError, AssertionError):
                    tally.violations.append((f"a {response.status_code} without an error: {response.text[:200]}",
                                             request))
            if tally.requests % check_every == 0:
                records = _check(client, pid, tally, records, request)

        send()
        _check(client, pid, tally, records, None)
    return tally


def _check(client: httpx.Client, pid: int, tally: HttpTally, records: int, request: Request | None) -> int:
    """Health, the ledger's size (returned: a mismatch is reported once) and the server's peak memory."""
    shown = request or Request("-", b"", {})
    try:
        live = client.get("/v2/health/live", timeout=5)
        tally.health_checks += 1
        if live.status_code != 200:
            tally.violations.append((f"health answered {live.status_code}", shown))
        held = _ledger_records(client)
    except httpx.HTTPError as exc:
        tally.violations.append((f"health or metrics did not answer: {exc}", shown))
        return records
    if held != records:
        tally.violations.append((f"the ledger holds {held} records after {records} 200s", shown))
    peak = _peak_rss(pid)
    if tally.requests <= WARM_UP or not tally.rss_baseline:
        tally.rss_baseline = peak
    tally.rss_peak = peak
    if tally.rss_growth > RSS_ALLOWANCE:
        tally.violations.append((f"peak resident memory grew by {tally.rss_growth >> 20} MiB", shown))
    return held
