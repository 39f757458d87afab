"""One serving process for every scenario of a platform: real cube shards holding a
table per scenario, one cube-transfer watching a scenario folder, the store read through
the fileserver. Each scenario's answers equal a local computation from its own version's
files; one scenario's corrupt version or removal never changes another's answers."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import numpy as np
import pytest
from serving_helpers import ECTL, ServeProc
from test_serving import SLOTS, expected
from tests.conftest import shared_path

from elasticctr.net import free_port, wait_for_port
from elasticctr.scenarios import DirRegistry, Scenario

pytestmark = pytest.mark.integration

V1, V2 = "20261201/00", "20261201/01"
FEED_SLOTS = list(range(13))  # another slot config: the first 13 slots of the same data


def wait_for(cond, what: str, timeout: float = 90.0, log=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{what}: last {last!r}\n{log() if log else ''}")


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    from elasticctr.serving.testing import keys_of_file, write_version

    demo = shared_path("data", "elasticctr", "serving_demo_data.txt")
    tmp = tmp_path_factory.mktemp("platform")
    store = tmp / "store"
    keys = keys_of_file(demo, SLOTS)
    stores = {
        "default": store,
        "coupon": store / "scenarios" / "coupon",
        "feed": store / "scenarios" / "feed",
    }
    write_version(stores["default"], V1, slots=SLOTS, dim=8, keys=keys, seed=1)
    write_version(stores["coupon"], V1, slots=SLOTS, dim=8, keys=keys, seed=3)
    write_version(stores["feed"], V1, slots=FEED_SLOTS, dim=4, keys=keys, seed=5)
    registry = DirRegistry(tmp / "registry")
    registry.add(Scenario("coupon", team="growth", slots=tuple(SLOTS)))
    registry.add(Scenario("feed", team="content", slots=tuple(FEED_SLOTS)))
    procs: list[subprocess.Popen] = []

    def start(args, name):
        log = open(tmp / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
        procs.append(
            subprocess.Popen(
                [*ECTL, *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )

    urls = []
    serve = None
    try:
        for shard in range(2):
            port = free_port()
            start(["cube", "server", "--cube-root", str(tmp / "root"),
                   "--state-dir", str(tmp / f"state-{shard}"), "--shard", str(shard),
                   "--num-shards", "2", "--port", str(port)], f"cube-{shard}")  # fmt: skip
            wait_for_port("127.0.0.1", port, timeout=60, what=f"cube shard {shard}")
            urls.append(f"http://127.0.0.1:{port}")
        fs_port = free_port()
        start(["fileserver", "--root", str(store), "--port", str(fs_port),
               "--allow-anonymous-writes"], "fileserver")  # fmt: skip
        wait_for_port("127.0.0.1", fs_port, timeout=60, what="fileserver")
        store_url = f"http://127.0.0.1:{fs_port}"
        serve = ServeProc(
            ["--store", store_url, "--cube", ",".join(urls), "--scenarios",
             "--poll-interval", "0.5", "--cache", str(tmp / "cache")],
            tmp / "serve.log",
        )  # fmt: skip
        start(["cube", "transfer", "--model-store", store_url, "--cube-root", str(tmp / "root"),
               "--scenarios", str(registry.root), "--interval", "0.5",
               # A free port: another run's watcher may hold the default 8510.
               "--listen", "127.0.0.1:0", "--notify", serve.url + "/admin/version",
               *[a for u in urls for a in ("--shard-url", u)]], "transfer")  # fmt: skip
        yield {
            "serve": serve,
            "stores": stores,
            "registry": registry,
            "demo": demo.read_bytes(),
            "feed_demo": only_slots(demo.read_bytes(), FEED_SLOTS),
            "keys": keys,
            "tmp": tmp,
        }
    finally:
        if serve is not None:
            serve.stop()
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(15)


def only_slots(data: bytes, slots: list[int]) -> bytes:
    """The same samples with only the given slots' features (feed's slot config)."""
    keep = {str(s).encode() for s in slots}
    lines = []
    for line in data.splitlines():
        show, click, *feats = line.split()
        feats = [f for f in feats if f.rsplit(b":", 1)[1] in keep]
        lines.append(b" ".join([show, click, *feats]))
    return b"\n".join(lines) + b"\n"


def data_of(env, path: str) -> bytes:
    return env["feed_demo"] if "/feed/" in path else env["demo"]


def predict(env, path: str) -> httpx.Response:
    return httpx.post(
        env["serve"].url + path,
        content=data_of(env, path),
        headers={"Content-Type": "text/plain"},
        timeout=30,
    )


def served(env) -> dict:
    return httpx.get(env["serve"].url + "/v1/scenarios", timeout=10).json()["scenarios"]


def test_every_scenario_is_served_by_its_own_version(platform):
    env = platform
    wait_for(
        lambda: (
            {k: v["version"] for k, v in served(env).items()}
            == {"default": V1, "coupon": V1, "feed": V1}
        ),
        "all three scenarios on V1",
        log=env["serve"].text,
    )
    answers = {}
    for name, path in (
        ("default", "/v1/predict"),
        ("coupon", "/v1/scenarios/coupon/predict"),
        ("feed", "/v1/scenarios/feed/predict"),
    ):
        r = predict(env, path)
        assert r.status_code == 200 and r.json()["version"] == V1, r.text
        want = expected(env["stores"][name], V1, data_of(env, path))
        np.testing.assert_allclose(r.json()["probabilities"], want, atol=1e-6)
        answers[name] = np.asarray(r.json()["probabilities"])
    # Three models, three different answers from the one process.
    assert not np.allclose(answers["coupon"], answers["default"])
    assert not np.allclose(answers["feed"], answers["coupon"])
    assert (
        predict(env, "/v1/scenarios/default/predict").json() == predict(env, "/v1/predict").json()
    )
    info = httpx.get(env["serve"].url + "/v1/scenarios/feed/version", timeout=10).json()
    assert info["scenario"] == "feed" and info["slots"] == FEED_SLOTS and info["embedding_dim"] == 4

    # Unknown scenarios and routes are precise 404s; the metrics label never holds the name.
    r = predict(env, "/v1/scenarios/nosuch/predict")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_scenario"
    assert "coupon" in r.json()["error"]["message"]
    assert predict(env, "/v1/scenarios/coupon/nosuch").status_code == 404
    assert httpx.get(env["serve"].url + "/v1/scenarios/coupon/predict").status_code == 405
    metrics = httpx.get(env["serve"].url + "/metrics").text
    assert 'route="/v1/scenarios/{name}/predict"' in metrics and "nosuch" not in metrics
    assert f'elasticctr_serving_version_info{{scenario="feed",version="{V1}"}} 1.0' in metrics
    r = httpx.post(env["serve"].url + "/admin/version", json={"scenario": "Bad!", "version": V1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_scenario"


def test_a_corrupt_version_or_a_removed_scenario_leaves_the_others_alone(platform):
    from elasticctr.serving.testing import write_version

    env = platform
    wait_for(lambda: served(env).get("feed", {}).get("version") == V1, "feed on V1")
    # coupon's V2 is corrupt (a sparse file changed after its manifest): rejected by
    # cube-transfer, coupon keeps V1; feed's V2 in the same polls goes live.
    vdir = write_version(env["stores"]["coupon"], V2, slots=SLOTS, dim=8, keys=env["keys"], seed=4)
    part = next((vdir / "sparse").glob("part-*.values.npy"))
    part.write_bytes(part.read_bytes()[:-4] + b"\0\0\0\0")
    write_version(env["stores"]["feed"], V2, slots=FEED_SLOTS, dim=4, keys=env["keys"], seed=6)
    wait_for(lambda: served(env)["feed"]["version"] == V2, "feed on V2", log=env["serve"].text)
    time.sleep(1.5)  # a few more polls: coupon must still be on V1
    assert served(env)["coupon"]["version"] == V1
    r = predict(env, "/v1/scenarios/coupon/predict")
    np.testing.assert_allclose(
        r.json()["probabilities"], expected(env["stores"]["coupon"], V1, env["demo"]), atol=1e-6
    )
    r = predict(env, "/v1/scenarios/feed/predict")
    np.testing.assert_allclose(
        r.json()["probabilities"],
        expected(env["stores"]["feed"], V2, env["feed_demo"]),
        atol=1e-6,
    )
    transfer_log = (env["tmp"] / "transfer.log").read_text()
    assert "[coupon] version 20261201/01 rejected" in transfer_log

    # feed is removed: its table goes, serving forgets it; coupon and default answer on.
    env["registry"].remove("feed")
    wait_for(lambda: "feed" not in served(env), "feed forgotten", log=env["serve"].text)
    r = predict(env, "/v1/scenarios/feed/predict")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_scenario"
    for path in ("/v1/predict", "/v1/scenarios/coupon/predict"):
        assert predict(env, path).status_code == 200
