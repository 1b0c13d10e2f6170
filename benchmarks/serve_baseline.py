"""The baseline a user would write: a minimal FastAPI + ONNX Runtime app speaking the same protocol
(Open Inference Protocol v2 with JSON tensors and the binary tensor data extension), with no ledger,
no audit, no verification. bench_serve.py compares `sealtrace serve` against it.

It is a competent minimal app, not a strawman: orjson both ways, the model run in a thread pool so
the event loop keeps accepting, ORT's session made once.

    python benchmarks/serve_baseline.py MODEL.onnx --port 8000 [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnxruntime as ort
import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

DTYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32, "UINT8": np.uint8, "BOOL": np.bool_}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


def make_app(model: str, threads: int) -> FastAPI:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    executor = ThreadPoolExecutor()
    app = FastAPI()

    def handle(body: bytes, header_length: str | None, name: str) -> bytes:
        header, binary = (body, b"") if header_length is None else (body[: int(header_length)], body[int(header_length):])
        request = orjson.loads(header)
        feeds: dict[str, Any] = {}
        offset = 0
        for tensor in request["inputs"]:
            dtype = DTYPES[tensor["datatype"]]
            size = (tensor.get("parameters") or {}).get("binary_data_size")
            if size is not None:
                feeds[tensor["name"]] = np.frombuffer(binary[offset : offset + size], dtype).reshape(tensor["shape"])
                offset += size
            else:
                feeds[tensor["name"]] = np.asarray(tensor["data"], dtype).reshape(tensor["shape"])
        values = session.run(None, feeds)
        outputs = [{"name": o.name, "datatype": NAMES[v.dtype], "shape": list(v.shape), "data": v.reshape(-1)}
                   for o, v in zip(session.get_outputs(), values, strict=True)]
        response = {"model_name": name, "id": request.get("id"), "outputs": outputs}
        return orjson.dumps(response, option=orjson.OPT_SERIALIZE_NUMPY)

    @app.post("/v2/models/{name}/infer")
    async def infer(name: str, request: Request) -> Response:
        body = await request.body()
        loop = asyncio.get_running_loop()
        content = await loop.run_in_executor(executor, handle, body,
                                             request.headers.get("inference-header-content-length"), name)
        return Response(content, media_type="application/json")

    @app.get("/v2/health/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    print(f"serving on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(make_app(args.model, args.threads), log_level="warning", access_log=False)).run(
        sockets=[sock])


if __name__ == "__main__":
    main()
