"""Kubeflow Trainer's trainerStatus: rank 0 POSTs it to a local HTTPS server with a CA made here, as the Trainer's
status server expects (path from the URL, Bearer token read at each send, TLS verified with the CA), at most once per
5 s, and a server that refuses never fails training. The body is checked against the vendored TrainJob CRD's
``status.trainerStatus`` schema. Network: loopback only.
"""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import json
import logging
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from pytorch_contract.progress import ProgressRecord
from pytorch_core import _trainer_status, launcher
from pytorch_core._trainer_status import TrainerStatusClient, client_from_env, trainer_status_body
from pytorch_core.config import PyTorch
from pytorch_core.frontend import PlainFrontEnd
from pytorch_core.progress import report_progress

cryptography = pytest.importorskip("cryptography")

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "backend_plugin" / "crds" / "trainer.kubeflow.org_trainjobs.yaml"
STATUS_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/train-1/status"
T0 = 1_800_000_000.0


def _trainer_status_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["trainerStatus"]


def _check_body(body: dict[str, Any]) -> None:
    import jsonschema

    assert set(body) == {"trainerStatus"}
    status = body["trainerStatus"]
    jsonschema.validate(status, _trainer_status_schema())
    assert "lastUpdatedTime" in status  # the CRD's CEL rule: has(self.lastUpdatedTime)
    datetime.datetime.strptime(status["lastUpdatedTime"], "%Y-%m-%dT%H:%M:%SZ")  # RFC 3339, as metav1.Time


# -- a CA and a server certificate for 127.0.0.1 -------------------------------------------------------------------


def _make_ca(directory: Path, name: str) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 signed by it: (ca.crt, server.crt, server.key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubeflow-trainer-controller-manager")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, cert_path, key_path = directory / f"{name}-ca.crt", directory / f"{name}.crt", directory / f"{name}.key"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_path, cert_path, key_path


class StatusServer:
    """A stand-in for the Trainer's status server: POST on the TrainJob's status path, a Bearer token, JSON."""

    def __init__(self, cert: Path, key: Path, *, refuse: int = 0) -> None:
        self.requests: list[dict[str, Any]] = []
        self.refuse = refuse
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                server.requests.append(
                    {
                        "path": self.path,
                        "authorization": self.headers.get("Authorization"),
                        "content_type": self.headers.get("Content-Type"),
                        "body": body,
                        "at": time.monotonic(),
                    }
                )
                ok = self.path == STATUS_PATH and not server.refuse
                code = 200 if ok else (server.refuse or 404)
                reply = body if ok else {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": code}
                data = json.dumps(reply).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}{STATUS_PATH}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> StatusServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    directory = tmp_path_factory.mktemp("pki")
    ca, cert, key = _make_ca(directory, "trainer")
    other_ca, _, _ = _make_ca(directory, "other")
    return SimpleNamespace(ca=ca, cert=cert, key=key, other_ca=other_ca)


@pytest.fixture
def server(pki: SimpleNamespace) -> Iterator[StatusServer]:
    with StatusServer(pki.cert, pki.key) as running:
        yield running


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _record(**changes: Any) -> ProgressRecord:
    base: dict[str, Any] = dict(
        step=1200, total=5000, metrics={"loss": 0.1244}, rate=20.0, eta_s=190.0, reported_at=T0, started_at=T0 - 60
    )
    base.update(changes)
    return ProgressRecord(**base)


# -- the body ------------------------------------------------------------------------------------------------------


def test_the_body_is_the_trainers_update_request() -> None:
    body = trainer_status_body(_record(), T0 + 10)
    _check_body(body)
    assert body == {
        "trainerStatus": {
            "progressPercentage": 24,
            "estimatedRemainingSeconds": 180,
            "metrics": [
                {"name": "step", "value": "1200"},
                {"name": "total_steps", "value": "5000"},
                {"name": "loss", "value": "0.1244"},
            ],
            "lastUpdatedTime": "2027-01-15T08:00:10Z",
        }
    }


def test_100_percent_is_kept_for_the_end() -> None:
    assert trainer_status_body(_record(step=5000), T0)["trainerStatus"]["progressPercentage"] == 99
    final = trainer_status_body(_record(step=5000), T0, final=True)["trainerStatus"]
    assert final["progressPercentage"] == 100 and final["estimatedRemainingSeconds"] == 0


def test_without_a_total_there_is_no_percentage_nor_estimate() -> None:
    status = trainer_status_body(_record(total=None, eta_s=None), T0)["trainerStatus"]
    assert "progressPercentage" not in status and "estimatedRemainingSeconds" not in status
    _check_body({"trainerStatus": status})


def test_metrics_are_kept_within_the_crds_limits() -> None:
    metrics = {f"{'m' * 70}{i}": 1e300 * i for i in range(300)} | {"nan_metric": float("nan")}
    body = trainer_status_body(_record(metrics=metrics, eta_s=1e12), T0)
    _check_body(body)
    status = body["trainerStatus"]
    assert len(status["metrics"]) == 256
    assert status["estimatedRemainingSeconds"] == 2**31 - 1  # int32


# -- the client against a local HTTPS server ------------------------------------------------------------------------


def test_a_post_reaches_the_status_path_with_the_token_over_verified_tls(
    server: StatusServer, pki: SimpleNamespace, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("token-1\n")
    client = client_from_env(
        {"KUBEFLOW_TRAINER_SERVER_URL": server.url, "KUBEFLOW_TRAINER_SERVER_TOKEN": str(token),
         "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(pki.ca)}
    )  # fmt: skip
    assert client is not None
    assert client.post(trainer_status_body(_record(), T0)) is True
    (request,) = server.requests
    assert request["path"] == STATUS_PATH
    assert request["authorization"] == "Bearer token-1"
    assert request["content_type"] == "application/json"
    _check_body(request["body"])


def test_the_token_is_read_again_at_each_send(server: StatusServer, pki: SimpleNamespace, tmp_path: Path) -> None:
    token = tmp_path / "token"
    clock = Clock()
    client = TrainerStatusClient(server.url, str(token), str(pki.ca), clock=clock)
    for name in ("first", "rotated", "rotated-again"):
        token.write_text(name)
        assert client.post(trainer_status_body(_record(), T0))
        clock.now += _trainer_status.MIN_INTERVAL_S
    assert [r["authorization"] for r in server.requests] == ["Bearer first", "Bearer rotated", "Bearer rotated-again"]


def test_at_most_one_post_per_five_seconds(server: StatusServer, pki: SimpleNamespace, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t")
    clock = Clock()
    client = TrainerStatusClient(server.url, str(token), str(pki.ca), clock=clock)
    sent = []
    for _ in range(120):  # a report every 100 ms for 12 s
        sent.append(client.post(trainer_status_body(_record(), T0)))
        clock.now += 0.1
    assert sent.count(True) == len(server.requests) == 3  # at 0 s, 5 s, 10 s
    assert _trainer_status.MIN_INTERVAL_S == 5.0


def test_a_refusing_server_is_logged_once_and_never_raises(
    pki: SimpleNamespace, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = tmp_path / "token"
    token.write_text("expired")
    clock = Clock()
    with StatusServer(pki.cert, pki.key, refuse=403) as refusing:
        client = TrainerStatusClient(refusing.url, str(token), str(pki.ca), clock=clock)
        with caplog.at_level(logging.WARNING, logger=_trainer_status.__name__):
            for _ in range(3):
                assert client.post(trainer_status_body(_record(), T0)) is False
                clock.now += _trainer_status.MIN_INTERVAL_S
        assert len(refusing.requests) == 3 and client.failed == 3
    messages = [r.getMessage() for r in caplog.records if r.name == _trainer_status.__name__]
    assert len(messages) == 1 and "HTTP 403 Forbidden" in messages[0] and "training goes on" in messages[0]
    assert "expired" not in messages[0]  # the token is never logged


def test_a_server_whose_certificate_the_ca_did_not_sign_gets_no_token(
    pki: SimpleNamespace, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token = tmp_path / "token"
    token.write_text("secret")
    with StatusServer(pki.cert, pki.key) as impostor:
        client = TrainerStatusClient(impostor.url, str(token), str(pki.other_ca))
        with caplog.at_level(logging.WARNING, logger=_trainer_status.__name__):
            assert client.post(trainer_status_body(_record(), T0)) is False
        assert impostor.requests == []
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text


def test_a_plain_http_url_is_refused_before_the_token_is_read(tmp_path: Path, caplog) -> None:
    client = TrainerStatusClient("http://127.0.0.1:9/status", str(tmp_path / "missing"), None)
    with caplog.at_level(logging.WARNING, logger=_trainer_status.__name__):
        assert client.post({"trainerStatus": {}}) is False
    assert "is not an https URL" in caplog.text


def test_no_url_no_client() -> None:
    assert client_from_env({}) is None
    assert client_from_env({"KUBEFLOW_TRAINER_SERVER_URL": " "}) is None


# -- through a pod's launch ------------------------------------------------------------------------------------------


class PodFrontEnd(PlainFrontEnd):
    def is_local(self) -> bool:
        return False


def test_a_trainjob_pod_posts_its_progress_and_100_percent_at_the_end(
    server: StatusServer, pki: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TrainJob node with one rank (global rank 0) runs the function in the pod process; the launcher's thread
    POSTs, throttled (0.5 s here instead of 5 s), and the last request says 100 %."""
    token = tmp_path / "token"
    token.write_text("pod-token")
    env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
        "KUBEFLOW_TRAINER_SERVER_URL": server.url,
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(token),
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(pki.ca),
        "FLYTE_PYTORCH_PROGRESS_LINE": "0",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(_trainer_status, "MIN_INTERVAL_S", 0.5)

    def train(steps: int) -> int:
        for step in range(1, steps + 1):
            time.sleep(0.05)
            report_progress(step, steps, loss=1.0 / step)
            if step == 20:
                token.write_text("pod-token-rotated")
        return steps

    task = SimpleNamespace(task_config=PyTorch(preflight=False), _task_function=train, name="t")
    started = time.monotonic()
    assert launcher.run_distributed(task, {"steps": 50}, PodFrontEnd()) == 50
    took = time.monotonic() - started
    bodies = [r["body"] for r in server.requests]
    assert 2 <= len(bodies) <= took / 0.5 + 1
    for body in bodies:
        _check_body(body)
    assert bodies[-1]["trainerStatus"]["progressPercentage"] == 100
    assert all(b["trainerStatus"]["progressPercentage"] <= 99 for b in bodies[:-1])
    assert {"name": "step", "value": "50"} in bodies[-1]["trainerStatus"]["metrics"]
    assert server.requests[-1]["authorization"] == "Bearer pod-token-rotated"


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_trainjob_node_with_two_ranks_shows_rank_0_only(
    server: StatusServer, pki: SimpleNamespace, tmp_path: Path
) -> None:
    """A TrainJob node's pod process runs 2 ranks (PET_NPROC_PER_NODE=2): rank 0's snapshots reach the pod's
    launcher through the control directory; it writes the record beside the outputs, POSTs trainerStatus at most
    every 5 s (real throttle) and ends with 100 %, and its log has the progress line once, never from a rank."""
    import os
    import socket
    import sys

    from pytorch_contract.progress import FILE_NAME, parse_record
    from tests.sdk.guarded_run import run_guarded

    token = tmp_path / "token"
    token.write_text("node-token")
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLYTE_PYTORCH_", "KUBEFLOW_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), str(Path(__file__).parent)]),
        PET_NNODES="1",
        PET_NPROC_PER_NODE="2",
        PET_NODE_RANK="0",
        PET_MASTER_ADDR="127.0.0.1",
        PET_MASTER_PORT=str(port),
        KUBEFLOW_TRAINER_SERVER_URL=server.url,
        KUBEFLOW_TRAINER_SERVER_TOKEN=str(token),
        KUBEFLOW_TRAINER_SERVER_CA_CERT=str(pki.ca),
        FLYTE_PYTORCH_PROGRESS_INTERVAL_S="1",
        PROGRESS_POD_OUTPUTS=str(outputs),
        PROGRESS_POD_STEPS="120",
    )
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PET_RDZV_ENDPOINT"):
        env.pop(name, None)
    run = run_guarded(
        [sys.executable, "-c", "import progress_pod; progress_pod.main()"],
        max_procs=12,
        timeout_s=180,
        cwd=str(tmp_path),
        env=env,
    )
    assert run.killed_for == "" and run.returncode == 0, run.output[-4000:]
    assert run.output.strip().splitlines()[-1] == "RESULT 120"
    record = parse_record((outputs / FILE_NAME).read_bytes())
    assert record.done and record.step == 120 and record.total == 120 and record.interval_s == 1.0
    assert record.metrics == {"loss": 1.0 / 120}  # rank 0's (rank 1 reports 100 more)
    assert len((outputs / "writes.log").read_text().splitlines()) >= 3  # every second over 6 s, and the last
    bodies = [r["body"] for r in server.requests]
    assert len(bodies) >= 2 and bodies[-1]["trainerStatus"]["progressPercentage"] == 100
    stamps = [r["at"] for r in server.requests]
    assert all(later - earlier >= 4.9 for earlier, later in zip(stamps[:-1], stamps[1:], strict=True)), stamps
    assert {r["authorization"] for r in server.requests} == {"Bearer node-token"}
    lines = [line for line in run.output.splitlines() if "progress: step" in line]
    assert lines and all(line.startswith("progress: step") for line in lines), lines  # never "[rank N] progress"
    assert lines[-1].startswith("progress: step 120/120 (100%), took ")
