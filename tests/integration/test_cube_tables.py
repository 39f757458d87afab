"""Many scenarios on one cube: a table per scenario in the same shard processes, each
published, versioned, budgeted and dropped on its own by one cube-transfer
(PlatformTransfer), against real `ectl cube server` processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import numpy as np
import pytest
from _cube_procs import ShardProc, make_version, random_keys, version_rows

from elasticctr import scenarios
from elasticctr.cube.client import CubeClient, ShardClient, ShardError
from elasticctr.cube.transfer import PlatformTransfer
from elasticctr.scenarios import DirRegistry, Scenario

pytestmark = pytest.mark.integration

SHARDS = 2
CAPACITY_MIB = 4


@pytest.fixture()
def platform(tmp_path):
    """Two shards with a 4-MiB capacity, a platform store, a scenario folder, a transfer."""
    cube_root = tmp_path / "cube"
    procs = [
        ShardProc(cube_root, tmp_path / f"state{i}", i, SHARDS, capacity_mib=CAPACITY_MIB).start()
        for i in range(SHARDS)
    ]
    store = tmp_path / "store"
    registry = DirRegistry(tmp_path / "scenarios")
    echoed: list[str] = []
    transfer = PlatformTransfer(
        cube_root=cube_root,
        shard_urls=[p.url for p in procs],
        store=str(store),
        registry=registry,
        keep=2,
        echo=echoed.append,
    )
    client = CubeClient([p.url for p in procs])
    yield {
        "store": store,
        "cube_root": cube_root,
        "procs": procs,
        "registry": registry,
        "transfer": transfer,
        "client": client,
        "echoed": echoed,
    }
    client.close()
    transfer.close()
    for p in procs:
        p.stop()


def scenario_store(env, name: str):
    return env["store"] / scenarios.SCENARIOS_DIR / name if name != "default" else env["store"]


def lookup(env, keys, version: str, table: str):
    rows, missing = env["client"].lookup(keys, version, table)
    return rows, missing


def committed(env, table: str) -> list[str | None]:
    return [ShardClient(p.url).table_status(table).get("committed") for p in env["procs"]]


def test_each_scenario_gets_its_own_table_and_versions(platform):
    env = platform
    keys_a, keys_b = random_keys(3000, seed=1), random_keys(2000, seed=2)
    env["registry"].add(Scenario("coupon", team="growth", slots=(0, 1, 2)))
    env["registry"].add(Scenario("feed", team="content", slots=(0, 1, 2)))
    make_version(scenario_store(env, "coupon"), "20200401/00", keys_a, 1)
    make_version(scenario_store(env, "feed"), "20200401/00", keys_b, 7)
    make_version(scenario_store(env, "default"), "20200401/00", keys_a, 3)

    published = env["transfer"].poll_once()
    assert published == {"default": "20200401/00", "coupon": "20200401/00", "feed": "20200401/00"}
    # Same version id in three tables, three different tables of rows.
    for table, keys, tag in (("coupon", keys_a, 1), ("feed", keys_b, 7), ("default", keys_a, 3)):
        rows, missing = lookup(env, keys, "20200401/00", table)
        assert missing == 0 and np.array_equal(rows, version_rows(keys, tag)), table
    # Keys of one scenario are absent from another's table (never shared rows).
    _, missing = lookup(env, keys_a, "20200401/00", "feed")
    assert missing == keys_a.size

    # One scenario moves on alone; the others keep their version.
    make_version(scenario_store(env, "coupon"), "20200401/01", keys_a, 2)
    assert env["transfer"].poll_once()["coupon"] == "20200401/01"
    assert committed(env, "coupon") == ["20200401/01"] * SHARDS
    assert committed(env, "feed") == ["20200401/00"] * SHARDS
    assert committed(env, "default") == ["20200401/00"] * SHARDS
    status = ShardClient(env["procs"][0].url).status()
    assert set(status["tables"]) == {"default", "coupon", "feed"}
    assert status["tables"]["coupon"]["held_bytes"] > 0
    assert (env["cube_root"] / "scenarios" / "coupon" / "versions" / "20200401" / "01").is_dir()

    # The binary API: a table the shard does not hold is a 404 naming it.
    with pytest.raises(ShardError) as err:
        ShardClient(env["procs"][0].url).lookup(keys_a[:3], None, "nosuch")
    assert err.value.status == 404 and "nosuch" in str(err.value)


def test_a_broken_or_oversized_scenario_never_touches_the_others(platform):
    env = platform
    keys = random_keys(2000, seed=3)
    env["registry"].add(Scenario("steady", slots=(0, 1, 2)))
    env["registry"].add(Scenario("broken", slots=(0, 1, 2)))
    # ~60k keys: about 1.4 MiB on each of the two shards, over a 1-MiB budget.
    env["registry"].add(Scenario("huge", slots=(0, 1, 2), cube_memory_mib=1))
    # ~250k keys: fits its own budget, not the shards' 4-MiB capacity.
    env["registry"].add(Scenario("wide", slots=(0, 1, 2), cube_memory_mib=64))
    make_version(scenario_store(env, "steady"), "20200402/00", keys, 1)
    make_version(scenario_store(env, "broken"), "20200402/00", keys, 1)
    make_version(scenario_store(env, "huge"), "20200402/00", random_keys(60_000, seed=4), 1)
    make_version(scenario_store(env, "wide"), "20200402/00", random_keys(250_000, seed=5), 1)
    env["transfer"].poll_once()
    assert committed(env, "steady") == ["20200402/00"] * SHARDS
    assert committed(env, "broken") == ["20200402/00"] * SHARDS

    # The next version of `broken` is corrupt; `steady` publishes in the same poll.
    vdir = make_version(scenario_store(env, "broken"), "20200402/01", keys, 2)
    part = next((vdir / "sparse").glob("part-*.values.npy"))
    part.write_bytes(part.read_bytes()[:-8] + b"\0" * 8)
    make_version(scenario_store(env, "steady"), "20200402/01", keys, 2)
    published = env["transfer"].poll_once()
    assert published["steady"] == "20200402/01" and published["broken"] is None
    errors = env["transfer"].status()["scenarios"]
    assert "sha256" in errors["broken"]["error"]
    assert committed(env, "broken") == ["20200402/00"] * SHARDS  # still serving the old one
    rows, _ = lookup(env, keys, "20200402/00", "broken")
    assert np.array_equal(rows, version_rows(keys, 1))

    # Budget and capacity refusals name the scenario, the sizes and the knob to turn.
    huge, wide = errors["huge"]["error"], errors["wide"]["error"]
    assert (
        "table 'huge'" in huge
        and "budget of 1.0 MiB" in huge
        and "global.scenario.cubeMemoryMiB" in huge
    )
    assert "table 'wide'" in wide and "capacity" in wide and "remove a scenario" in wide
    for table in ("huge", "wide"):
        assert set(committed(env, table)) == {None}
    # Nothing half-loaded: the refused versions hold no bytes on any shard.
    for p in env["procs"]:
        tables = ShardClient(p.url).status()["tables"]
        assert tables.get("huge", {}).get("held_bytes", 0) == 0
        assert tables.get("wide", {}).get("held_bytes", 0) == 0
    rows, missing = lookup(env, keys, "20200402/01", "steady")
    assert missing == 0 and np.array_equal(rows, version_rows(keys, 2))


def test_removing_a_scenario_drops_its_tables_everywhere_even_after_a_restart(platform):
    env = platform
    keys = random_keys(1000, seed=6)
    for name in ("keep", "gone"):
        env["registry"].add(Scenario(name, slots=(0, 1, 2)))
        make_version(scenario_store(env, name), "20200403/00", keys, 5)
    env["transfer"].poll_once()
    assert committed(env, "gone") == ["20200403/00"] * SHARDS

    # Shard 1 is down while the scenario is removed; it restores the table on restart
    # from its state dir, and the next poll drops it there too.
    env["procs"][1].stop()
    env["registry"].remove("gone")
    env["transfer"].poll_once()
    status0 = ShardClient(env["procs"][0].url).status()
    assert "gone" not in status0["tables"] and "keep" in status0["tables"]
    assert not (env["cube_root"] / "scenarios" / "gone").exists()
    env["procs"][1].start()
    assert "gone" in ShardClient(env["procs"][1].url).status()["tables"]
    env["transfer"].poll_once()
    for p in env["procs"]:
        assert set(ShardClient(p.url).status()["tables"]) == {"default", "keep"}
    rows, missing = lookup(env, keys, "20200403/00", "keep")
    assert missing == 0 and np.array_equal(rows, version_rows(keys, 5))
    assert any("dropped tables" in line and "gone" in line for line in env["echoed"])


def test_a_restarted_shard_comes_back_on_every_tables_committed_version(platform):
    env = platform
    keys = random_keys(1500, seed=8)
    for i, name in enumerate(("alpha", "beta")):
        env["registry"].add(Scenario(name, slots=(0, 1, 2)))
        make_version(scenario_store(env, name), "20200404/00", keys, 10 + i)
    env["transfer"].poll_once()
    make_version(scenario_store(env, "alpha"), "20200404/01", keys, 20)
    env["transfer"].poll_once()
    env["procs"][0].kill()
    env["procs"][0].start()
    assert committed(env, "alpha") == ["20200404/01"] * SHARDS
    assert committed(env, "beta") == ["20200404/00"] * SHARDS
    rows, _ = lookup(env, keys, "20200404/01", "alpha")
    assert np.array_equal(rows, version_rows(keys, 20))
    rows, _ = lookup(env, keys, "20200404/00", "beta")
    assert np.array_equal(rows, version_rows(keys, 11))


def test_admin_and_lookup_requests_with_bad_tables_are_refused(platform):
    url = platform["procs"][0].url
    for body in (
        {"version": "20200401/00", "table": "Bad_Name"},
        {"version": "20200401/00", "table": 7},
    ):
        r = httpx.post(f"{url}/admin/load", json=body, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["code"] == "bad_table"
    r = httpx.post(f"{url}/admin/drop", json={"table": "default"}, timeout=10)
    assert r.status_code == 400
    r = httpx.post(
        f"{url}/admin/load",
        json={"version": "20200401/00", "table": "x", "budget_bytes": -1},
        timeout=10,
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_budget"
    r = httpx.post(f"{url}/v1/lookup.json", json={"keys": [1], "table": "unknown"}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "no_table"


def test_transfer_process_follows_a_scenario_folder(platform, tmp_path):
    """`ectl cube transfer --scenarios DIR`: the watcher picks up a scenario added while it
    runs and drops one removed while it runs."""
    env = platform
    env["transfer"].close()
    keys = random_keys(1000, seed=9)
    args = [
        sys.executable, "-m", "elasticctr.cli.main", "cube", "transfer",
        "--model-store", str(env["store"]), "--cube-root", str(env["cube_root"]),
        "--scenarios", str(env["registry"].root), "--interval", "0.5",
        "--listen", "127.0.0.1:0",  # another run's watcher may hold the default 8510
        *[a for p in env["procs"] for a in ("--shard-url", p.url)],
    ]  # fmt: skip
    log = open(tmp_path / "transfer.log", "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
    try:
        env["registry"].add(Scenario("late", slots=(0, 1, 2)))
        make_version(scenario_store(env, "late"), "20200405/00", keys, 4)
        wait_until(lambda: committed(env, "late") == ["20200405/00"] * SHARDS, proc, tmp_path)
        env["registry"].remove("late")
        wait_until(
            lambda: all("late" not in ShardClient(p.url).status()["tables"] for p in env["procs"]),
            proc,
            tmp_path,
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    text = (tmp_path / "transfer.log").read_text()
    assert "scenario late registered" in text and "committed 20200405/00" in text


def wait_until(cond, proc, tmp_path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        assert proc.poll() is None, (tmp_path / "transfer.log").read_text()
        time.sleep(0.2)
    raise AssertionError((tmp_path / "transfer.log").read_text()[-3000:])


def test_scenario_records_are_checked():
    from elasticctr.errors import EctlError

    with pytest.raises(EctlError, match="not a valid scenario name"):
        Scenario("Coupon")
    with pytest.raises(EctlError, match="not a valid scenario name"):
        Scenario("a" * 41)
    with pytest.raises(EctlError, match="unknown keys"):
        Scenario.from_json(json.dumps({"name": "ok", "colour": 1}), "x.json")
    with pytest.raises(EctlError, match="cube_memory_mib"):
        Scenario("ok", cube_memory_mib=0)
    assert (
        scenarios.store_url("http://fs:8080/models/", "ok") == "http://fs:8080/models/scenarios/ok"
    )
    assert scenarios.store_url("http://fs:8080/models", "default") == "http://fs:8080/models"
