"""Fuzz the real service: arbitrary bodies, headers and JSON shaped like the OpenAPI schema.

Oracle: a 5xx or a dropped connection is always a failure; a 4xx carries a JSON error
with a code and a message; a request that is valid by the API description gets 200 with
one probability per sample. The server must still answer /healthz afterwards.
"""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serving_helpers import ServeProc
from test_serving import SLOTS, V1
from tests.conftest import shared_path

pytestmark = pytest.mark.integration

SETTINGS = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
LIMIT_SAMPLES = 50


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from elasticctr.serving.testing import keys_of_file, write_version

    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    tmp = tmp_path_factory.mktemp("fuzz")
    write_version(tmp / "store", V1, slots=SLOTS, dim=4, keys=keys_of_file(demo, SLOTS), seed=9)
    proc = ServeProc(["--store", str(tmp / "store"), "--poll-interval", "0",
                      "--max-request-samples", str(LIMIT_SAMPLES), "--max-body-bytes", "65536",
                      "--cache", str(tmp / "cache")], tmp / "serve.log")  # fmt: skip
    try:
        proc.wait_ready()
        with httpx.Client(base_url=proc.url, timeout=30) as client:
            yield proc, client
        assert httpx.get(proc.url + "/healthz").status_code == 200
        assert proc.proc.poll() is None, proc.text()
    finally:
        proc.stop()


def check(resp: httpx.Response, nsamples: int | None) -> None:
    """nsamples: the expected sample count if the request is valid, else None."""
    assert resp.status_code < 500, resp.text
    if resp.status_code == 200:
        doc = resp.json()
        assert doc["version"] == V1
        assert all(0.0 <= p <= 1.0 for p in doc["probabilities"])
        if nsamples is not None:
            assert len(doc["probabilities"]) == nsamples
    else:
        err = resp.json()["error"]
        assert err["code"] and err["message"]
    if nsamples is not None:
        assert resp.status_code == 200, resp.text
    return None


CTYPES = st.sampled_from(
    [
        "text/plain",
        "application/json",
        "text/plain; charset=utf-8",
        "application/json; x=y",
        "",
        "text/csv",
        "multipart/form-data",
    ]
)


@SETTINGS
@given(body=st.binary(max_size=2000), ctype=CTYPES)
def test_arbitrary_bytes(server, body, ctype):
    _, client = server
    check(client.post("/v1/predict", content=body, headers={"Content-Type": ctype}), None)


U64 = st.integers(min_value=0, max_value=2**64 - 1)
FEASIGN_OK = st.one_of(U64, U64.map(str))
FEASIGN_ANY = st.one_of(FEASIGN_OK, st.integers(), st.text(max_size=25), st.floats(),
                        st.booleans(), st.none())  # fmt: skip
SLOT_OK = st.sampled_from(SLOTS).map(str)
SLOT_ANY = st.one_of(SLOT_OK, st.integers(-5, 2**65).map(str), st.text(max_size=5))


@st.composite
def json_request(draw):
    valid = draw(st.booleans())
    fea, slot = (FEASIGN_OK, SLOT_OK) if valid else (FEASIGN_ANY, SLOT_ANY)
    samples = draw(
        st.lists(
            st.fixed_dictionaries(
                {"slots": st.dictionaries(slot, st.lists(fea, max_size=4), max_size=6)}
            ),
            min_size=1 if valid else 0,
            max_size=LIMIT_SAMPLES if valid else LIMIT_SAMPLES + 5,
        )
    )
    return {"samples": samples}, valid


@SETTINGS
@given(req=json_request())
def test_json_shaped_like_the_schema(server, req):
    doc, valid = req
    _, client = server
    resp = client.post("/v1/predict", content=json.dumps(doc),
                       headers={"Content-Type": "application/json"})  # fmt: skip
    check(resp, len(doc["samples"]) if valid else None)


@st.composite
def lines_request(draw):
    valid = draw(st.booleans())
    n = draw(st.integers(1, 20))
    lines = []
    for _ in range(n):
        show = draw(st.integers(0, 5))
        click = draw(st.integers(0, show))
        feats = draw(st.lists(st.tuples(U64, st.sampled_from(SLOTS)), max_size=8))
        lines.append(" ".join([str(show), str(click)] + [f"{f}:{s}" for f, s in feats]))
    if not valid:
        i = draw(st.integers(0, n - 1))
        junk = draw(st.sampled_from(["x", "-1", "1:", ":1", "1:2:3", "99999999999999999999999",
                                     "5:1000", "\x0b", "1e3"]))  # fmt: skip
        lines[i] = lines[i] + " " + junk
    return "\n".join(lines), n, valid


@SETTINGS
@given(req=lines_request())
def test_lines(server, req):
    body, n, valid = req
    _, client = server
    resp = client.post("/v1/predict", content=body, headers={"Content-Type": "text/plain"})
    check(resp, n if valid else None)
    if not valid:
        assert resp.status_code == 400


@SETTINGS
@given(head=st.binary(max_size=300))
def test_raw_http_heads(server, head):
    proc, _ = server
    with socket.create_connection(("127.0.0.1", proc.port), timeout=10) as s:
        s.sendall(head + b"\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    if reply:  # a request line may be incomplete forever: closing without answer is fine
        status = int(reply.split(b" ", 2)[1])
        assert status < 500 or status == 505, reply[:200]
