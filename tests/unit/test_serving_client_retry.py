"""`ectl predict`'s client asks again (on a new connection: through a Service, another
replica) when a replica could not answer an idempotent call, never for `no_model`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from elasticctr.errors import EctlError
from elasticctr.serving.client import NoModelYet, ServingClient

pytestmark = pytest.mark.fast


class _Server:
    """A real HTTP server answering the queued (status, error code) pairs, then 200."""

    def __init__(self, answers: list[tuple[int, str]]):
        self.answers = list(answers)
        self.connections: set[tuple] = set()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802 - http.server naming
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.connections.add(self.client_address)
                if outer.answers:
                    status, code = outer.answers.pop(0)
                    body = json.dumps({"error": {"code": code, "message": code}}).encode()
                else:
                    status = 200
                    body = b'{"version": "20200401/00", "probabilities": [0.5]}'
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_503_and_502_are_asked_again_on_a_new_connection():
    srv = _Server([(503, "cube_unavailable"), (502, "bad_gateway")])
    client = ServingClient(srv.url, retry_delays=(0.01, 0.01, 0.01))
    try:
        version, probs = client.predict_lines(b"1 0 1:0\n")
        assert (version, probs) == ("20200401/00", [0.5])
        assert client.retries == 2
        assert len(srv.connections) == 3
    finally:
        client.close()
        srv.close()


def test_no_model_and_client_errors_are_not_retried():
    srv = _Server([(503, "no_model"), (400, "malformed")])
    client = ServingClient(srv.url, retry_delays=(0.01,))
    try:
        with pytest.raises(NoModelYet):
            client.predict_lines(b"1 0 1:0\n")
        with pytest.raises(EctlError, match="400"):
            client.predict_lines(b"1 0 1:0\n")
        assert client.retries == 0
    finally:
        client.close()
        srv.close()


def test_gives_up_after_its_retries():
    srv = _Server([(503, "overloaded")] * 5)
    client = ServingClient(srv.url, retry_delays=(0.01, 0.01))
    try:
        with pytest.raises(EctlError, match="503"):
            client.predict_lines(b"1 0 1:0\n")
        assert client.retries == 2
    finally:
        client.close()
        srv.close()
