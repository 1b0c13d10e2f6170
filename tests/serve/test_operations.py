"""Operating the server: TLS through uvicorn's options, graceful shutdown on SIGTERM (in-flight requests
answered, a final tree head signed), the /ledger page in headless Chromium, the serve and serve-token
verbs' errors, and `run --ledger` (a run made by hand, recorded)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import signal
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from sealtrace.cli import main
from sealtrace.ledger import Ledger
from sealtrace.serve import InferenceService, ServeConfig, create_app
from tests.serve.conftest import ThreadServer, free_port
from tests.serve.test_crash import _start

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
REQUEST = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "data": X.reshape(-1).tolist()}]}


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made with cryptography."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def _service(tmp_path: Path, containers: dict[str, Path], keys: Any, **options: Any) -> InferenceService:
    return InferenceService(ServeConfig(models=[str(containers["tiny"])], ledger=str(tmp_path / "ledger.db"),
                                        trust=[str(keys[1])], sign_key=str(keys[0]), **options))


def test_tls_through_uvicorns_options(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    cert, key = _self_signed(tmp_path)
    service = _service(tmp_path, containers, keys, audit="io")
    with ThreadServer(create_app(service), ssl_certfile=str(cert), ssl_keyfile=str(key)) as server:
        with httpx.Client(verify=ssl.create_default_context(cafile=str(cert)), base_url=f"https://{server.url}", timeout=30) as client:
            response = client.post("/v2/models/tiny/infer", json=REQUEST)
            assert response.status_code == 200 and response.json()["parameters"]["ledger_index"] == 0
        with pytest.raises(httpx.HTTPError):  # the certificate is not one the default store trusts
            httpx.get(f"https://{server.url}/v2/health/ready", timeout=10)
        with pytest.raises(httpx.HTTPError):  # and the port speaks TLS only
            httpx.get(f"http://{server.url}/v2/health/ready", timeout=10)


def test_sigterm_answers_in_flight_requests_and_signs_a_final_head(tmp_path: Path, containers: dict[str, Path],
                                                                   keys: Any) -> None:
    location = str(tmp_path / "ledger.db")
    stderr: list[str] = []
    child, url = _start(containers["tiny"], location, keys, "full", stderr=stderr)
    big = np.random.default_rng(0).standard_normal((60_000, 4)).astype(np.float32)  # a request that takes a while
    header = f'{{"inputs":[{{"name":"x","shape":[60000,4],"datatype":"FP32","parameters":{{"binary_data_size":{big.nbytes}}}}}]}}'
    body = header.encode() + big.tobytes()
    results: list[Any] = []

    def send() -> None:
        try:
            response = httpx.post(f"{url}/v2/models/tiny/infer", content=body, timeout=60,
                                  headers={"Inference-Header-Content-Length": str(len(header))})
            results.append(response)
        except httpx.HTTPError as exc:  # sent after the listener closed
            results.append(exc)

    senders = [threading.Thread(target=send) for _ in range(6)]
    for sender in senders:
        sender.start()
    # SIGTERM once a request is in flight (a fixed wait raced the requests on a loaded machine).
    deadline = time.monotonic() + 60
    while _in_flight(url) < 1 and time.monotonic() < deadline and not results:
        time.sleep(0.01)
    child.send_signal(signal.SIGTERM)
    for sender in senders:
        sender.join(timeout=120)
    # A graceful stop is a normal exit, as uvicorn users expect: it was 143 (killed by the signal).
    assert child.wait(timeout=120) == 0
    assert "stopped: ledger closed with a final signed tree head\n" in stderr
    answered = [r for r in results if isinstance(r, httpx.Response)]
    assert answered and all(r.status_code == 200 for r in answered), [getattr(r, "text", r) for r in results]
    with Ledger.open(location, readonly=True) as ledger:
        report = ledger.verify([keys[1]])
        assert report.ok and report.unsigned == 0  # the final tree head covers every record
        for response in answered:
            ledger.record(response.json()["parameters"]["record_id"])


def test_sigterm_stops_the_server_while_a_run_goes_on(tmp_path: Path, keys: Any) -> None:
    """A run that would take hours: health answers while it runs, and SIGTERM stops the server within
    --timeout-graceful-shutdown and a few seconds, exit 0, the run abandoned and not recorded."""
    from sealtrace.container import seal_model
    from tests.serve.conftest import loop_model

    container = tmp_path / "loop.seal"
    seal_model(loop_model(), container, sign_with=keys[0])
    location = str(tmp_path / "ledger.db")
    stderr: list[str] = []
    child, url = _start(container, location, keys, "full", ("--timeout-graceful-shutdown", "1"), stderr)
    endless = {"inputs": [{"name": "trips", "shape": [], "datatype": "INT64", "data": 10**12},
                          {"name": "start", "shape": [1], "datatype": "FP32", "data": [0.0]}]}
    outcome: list[Any] = []

    def send() -> None:
        try:
            outcome.append(httpx.post(f"{url}/v2/models/loop/infer", json=endless, timeout=120))
        except httpx.HTTPError as exc:
            outcome.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    deadline = time.monotonic() + 60
    while _in_flight(url) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(5):  # the run holds no lock the event loop needs
        assert httpx.get(f"{url}/v2/health/live", timeout=5).json() == {"live": True}
    child.send_signal(signal.SIGTERM)
    stopping = time.monotonic()
    assert child.wait(timeout=30) == 0, "".join(stderr)
    assert time.monotonic() - stopping < 20
    sender.join(timeout=30)
    assert not isinstance(outcome[0], httpx.Response) or outcome[0].status_code != 200
    assert any("still going past --timeout-graceful-shutdown" in line for line in stderr), stderr
    with Ledger.open(location, readonly=True) as ledger:
        assert ledger.size == 0 and ledger.verify([keys[1]]).ok


def _in_flight(url: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("sealtrace_requests_in_flight "):
            return float(line.split()[1])
    return 0.0


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_ledger_page_renders_in_headless_chromium(tmp_path: Path, containers: dict[str, Path], keys: Any) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed in CI (.ci/run installs it)")
        pytest.skip("chromium not installed (apt-get install chromium)")
    service = _service(tmp_path, containers, keys, audit="full", head_interval=0.05)
    with ThreadServer(create_app(service)) as server:
        ids = [httpx.post(f"http://{server.url}/v2/models/tiny/infer", json=REQUEST, timeout=30).json()["parameters"]["record_id"]
               for _ in range(3)]
        service.ledger.sign_tree_head()
        page = f"http://{server.url}/ledger"
        shot = tmp_path / "ledger.png"
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
        done = subprocess.run([browser, *flags, f"--screenshot={shot}", "--window-size=1200,900", page],
                              capture_output=True, text=True, timeout=120, check=False)
        assert shot.is_file() and shot.stat().st_size > 5000, done.stderr[-2000:]
        console_errors = [line for line in done.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
        assert not console_errors, console_errors
        dom = subprocess.run([browser, *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=False)
        assert "Latest signed tree head" in dom.stdout and all(i in dom.stdout for i in ids)
        # The screenshot is the page, not an error page: mostly the light background, with dark text on it.
        from PIL import Image

        with Image.open(shot) as image:
            pixels = np.asarray(image.convert("L"))
        assert (pixels > 230).mean() > 0.5 and (pixels < 100).mean() > 0.005
        if os.environ.get("SEALTRACE_KEEP_SCREENSHOT"):
            shutil.copy(shot, os.environ["SEALTRACE_KEEP_SCREENSHOT"])
    with Ledger.open(str(tmp_path / "ledger.db"), readonly=True) as ledger:
        assert ledger.verify([keys[1]]).ok


def test_serve_refuses_what_it_must_not_serve(tmp_path: Path, containers: dict[str, Path], keys: Any,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from sealtrace.signing import generate_keypair
    from tests.conftest import mlp_model

    plain = tmp_path / "plain.onnx"
    plain.write_bytes(mlp_model(batch="N").SerializeToString())
    _, stranger = generate_keypair(tmp_path / "stranger.pem")
    ledger = str(tmp_path / "l.db")
    port = str(free_port())
    cases = [
        (["serve", str(plain), "--ledger", ledger, "--port", port], 2, "not a sealed container"),
        (["serve", str(containers["tiny"]), "--trust", str(stranger), "--ledger", ledger, "--port", port], 1, "trusted"),
        (["serve", str(containers["tiny"]), "--audit", "full", "--backend", "onnxruntime", "--ledger", ledger, "--port", port],
         2, "reference"),
        (["serve", str(containers["tiny"]), "--audit", "deferred", "--backend", "reference", "--ledger", ledger, "--port", port],
         2, "onnxruntime"),
        (["serve", str(containers["tiny"]), str(containers["tiny"]), "--ledger", ledger, "--port", port], 2, "--name"),
        (["serve", str(containers["tiny"]), "--name", "a/b", "--ledger", ledger, "--port", port], 2, "model name"),
        (["serve", str(containers["tiny"]), "--max-body", "lots", "--ledger", ledger, "--port", port], 2, "--max-body"),
        (["serve", str(containers["tiny"]), "--token-file", str(plain), "--ledger", ledger, "--port", port], 2, "UTF-8"),
    ]
    for argv, code, word in cases:
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert word in err and "Traceback" not in err, (argv, err)
    with ThreadServer(create_app(_service(tmp_path, containers, keys, audit="io"))) as running:
        assert main(["serve", str(containers["tiny"]), "--ledger", ledger, "--port", str(running.port)]) == 2
        assert "cannot listen" in capsys.readouterr().err


def test_serve_token_stores_only_a_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sealtrace.serve.tokens import TokenTable, token_hash

    tokens = tmp_path / "tokens.txt"
    assert main(["serve-token", "alice", "--token-file", str(tokens)]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("st_") and token not in tokens.read_text()
    assert tokens.read_text() == f"alice {token_hash(token)}\n" and (tokens.stat().st_mode & 0o777) == 0o600
    assert TokenTable.load(tokens).principal(token) == "alice"
    assert TokenTable.load(tokens).principal(token + "x") is None
    assert main(["serve-token", "alice", "--token-file", str(tokens)]) == 2  # one token per name
    tokens.write_text("alice nothex\n")
    assert main(["serve-token", "bob", "--token-file", str(tokens)]) == 2
    assert "SHA256HEX" in capsys.readouterr().err


def test_run_records_a_run_made_by_hand(tmp_path: Path, containers: dict[str, Path], keys: Any,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", X)
    store = str(tmp_path / "hand.db")
    log = tmp_path / "run.jsonl"
    argv = ["run", str(containers["tiny"]), "--input", f"x={tmp_path / 'x.npy'}", "--audit", str(log),
            "--ledger", store, "--ledger-key", str(keys[0])]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"ledger {store}: record" in out and "at index 0" in out
    with Ledger.open(store, readonly=True) as ledger:
        (_, record), = list(ledger.records())
        assert record["audit"] == "full" and record["trail"] is not None
        assert ledger.trail(record["trail"]) == log.read_bytes()
        assert ledger.inputs_of(record)["x"].tobytes() == X.tobytes()
        assert ledger.verify([keys[1]]).ok and ledger.latest_tree_head() is not None
    assert main(["run", str(containers["tiny"]), "--input", f"x={tmp_path / 'x.npy'}", "--ledger-key", str(keys[0])]) == 2
