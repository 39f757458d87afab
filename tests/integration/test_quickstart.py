"""`ectl quickstart` end to end with small settings: one platform (fileserver, MLflow, two
cube shards, one cube-transfer, one serving process) with two scenarios of different slot
configs and models, every part a real process; real Paddle PS training (elastic: leased
byte ranges, every trainer gets work, every sample counted once) per scenario; cube +
serving switch each scenario to its newest version; MLflow holds each scenario's run in
its own experiment and its versions in its own registered model; `ectl local status`
sees the platform while it runs, and Ctrl-C stops everything."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from elasticctr import constants as C
from elasticctr.net import free_port, wait_for_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ECTL = [sys.executable, "-m", "elasticctr.cli.main"]
VERSIONS = ["20200401/00", "20200401/01"]


def test_quickstart_serves_two_scenarios_logs_to_mlflow_and_stops_on_ctrl_c(tmp_path):
    workdir = tmp_path / "quickstart"  # $ELASTICCTR_HOME/quickstart: `--local` finds it
    proc = subprocess.Popen(
        [*ECTL, "quickstart", "--workdir", str(workdir), "--keep-running", "-o", "json"]
        # The demo's data model (16 slots, the demo vocabulary) and sample count (108k
        # trained) in two training hours instead of three: one export less. The second
        # scenario (coupon) trains half as many lines.
        + ["--hours", "3", "--lines", "60000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 900
        while not (workdir / "quickstart.json").exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "quickstart did not finish in 15 minutes"
            time.sleep(1)
        status = subprocess.run(
            [*ECTL, "local", "status", "--workdir", str(workdir), "-o", "json"],
            capture_output=True,
            text=True,
        )
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        running = {p["component"] for p in state["processes"] if p["alive"]}
        assert {"serving", "mlflow", "cube-0", "cube-1", "cube-transfer", "console"} <= running
        # One platform: one serving process answers for both scenarios, each with its
        # newest version; the default scenario (a single release's) has none here.
        listed = httpx.get(f"{state['endpoints']['serving']}/v1/scenarios", timeout=10).json()
        served = {n: s.get("version") for n, s in listed["scenarios"].items()}
        assert served == {"default": None, "feed": VERSIONS[-1], "coupon": VERSIONS[-1]}, listed
        tracked = _mlflow_readback(workdir)
        _rollback_and_unpin(tmp_path, state["endpoints"]["serving"])
        _console(workdir, tmp_path)
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert list(report["scenarios"]) == ["feed", "coupon"]
    # Both registered in the platform's scenario folder, with their slot configs.
    from elasticctr.scenarios import DirRegistry

    registered = DirRegistry(workdir / "scenarios").list()
    assert {n: (s.model, list(s.slots)) for n, s in registered.items()} == {
        "feed": ("dnn", list(range(16))),
        "coupon": ("wide_deep", list(range(100, 108))),
    }
    for name, sc in report["scenarios"].items():
        _check_scenario(workdir, name, sc, tracked[name], report["endpoints"]["serving"])
    feed, coupon = report["scenarios"]["feed"], report["scenarios"]["coupon"]
    # The demo data is learnable: served predictions of the held-out hour come within
    # 0.03 of the oracle (the true click probabilities' AUC; docs/local.md); coupon,
    # half the samples on 8 slots, within 0.05.
    assert feed["oracle_auc"] - 0.03 <= feed["auc"] <= feed["oracle_auc"] + 0.01, feed
    assert coupon["oracle_auc"] - 0.05 <= coupon["auc"] <= coupon["oracle_auc"] + 0.01, coupon
    assert feed["samples"] > coupon["samples"] > 0
    # Ctrl-C stopped everything: no process of this work folder is left.
    leftover = subprocess.run(["pgrep", "-f", str(workdir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
    assert not (workdir / "local.json").exists() and not (workdir / "tokens.json").exists()


def _rollback_and_unpin(home: Path, serving: str) -> None:
    """`ectl model rollback|unpin --local` on the running local platform: coupon goes back
    to its first version on cube and serving (the verb waits for serving), feed stays on
    its newest, and unpin serves coupon's newest again."""
    env = {**os.environ, "ELASTICCTR_HOME": str(home)}
    assert (home / "quickstart" / "tokens.json").stat().st_mode & 0o777 == 0o600

    def model(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([*ECTL, "model", *args, "--local", "-s", "coupon", "-o", "json"],
                              capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def served() -> dict[str, str | None]:
        listed = httpx.get(f"{serving}/v1/scenarios", timeout=10).json()["scenarios"]
        return {n: s.get("version") for n, s in listed.items() if n != "default"}

    listed = model("list")
    assert listed["store"] == VERSIONS and listed["committed"] == VERSIONS[-1], listed
    done = model("rollback")
    assert done["committed"] == VERSIONS[0] and done["previous"] == VERSIONS[-1], done
    assert done["serving"] == {serving: VERSIONS[0]}, done  # waited for serving
    assert served() == {"feed": VERSIONS[-1], "coupon": VERSIONS[0]}
    assert model("unpin")["was"] == VERSIONS[0]
    deadline = time.monotonic() + 120
    while served()["coupon"] != VERSIONS[-1]:
        assert time.monotonic() < deadline, served()
        time.sleep(1)


def _console(workdir: Path, tmp_path: Path) -> None:
    """The console the quickstart starts (docs/console.md), in Debian's Chromium through
    chromium-driver: both scenario cards with their served versions; coupon's versions,
    rolled back and followed again by clicking; the change log; a wrong token refused. Its
    API: no token -> 401; a team's token sees only that team's scenarios (another team's is
    404, as if absent). Screenshots go to $ELASTICCTR_SCREENSHOTS (docs/console/) or tmp."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    from tests.browser import chromium
    from tests.browser import served as card_served

    link = json.loads((workdir / "quickstart.json").read_text())["endpoints"]["console"]
    base = link.split("/#", 1)[0]
    shots = Path(os.environ.get("ELASTICCTR_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)

    # The API: a token is needed; a team's token sees its own scenarios only.
    assert httpx.get(f"{base}/api/scenarios", timeout=10).status_code == 401
    users = tmp_path / "users.yaml"
    users.write_text("- {user: ana, token: ana-token, teams: [growth]}\n"
                     "- {user: qs, token: qs-token, teams: [quickstart]}\n")  # fmt: skip
    port = free_port()
    other = subprocess.Popen([*ECTL, "console", "--local", "--workdir", str(workdir), "--users",
                              str(users), "--listen", f"127.0.0.1:{port}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_for_port("127.0.0.1", port, timeout=60, what="ectl console --users")
        url = f"http://127.0.0.1:{port}"
        ana = {"Authorization": "Bearer ana-token"}
        assert httpx.get(f"{url}/api/scenarios", headers=ana).json()["scenarios"] == []
        assert httpx.get(f"{url}/api/scenarios/coupon/versions", headers=ana).status_code == 404
        assert httpx.post(f"{url}/api/scenarios/coupon/rollback", headers=ana).status_code == 404
        qs = {"Authorization": "Bearer qs-token"}
        names = [
            r["name"] for r in httpx.get(f"{url}/api/scenarios", headers=qs).json()["scenarios"]
        ]
        assert names == ["coupon", "feed"], names
    finally:
        other.terminate()
        other.wait(30)

    driver = chromium()
    try:
        wait = WebDriverWait(driver, 60, poll_frequency=0.5)

        def served(name: str) -> str | None:
            return card_served(driver, name)

        driver.get(link)
        wait.until(lambda d: d.find_elements(By.ID, "card-coupon"))
        assert "#token" not in driver.current_url  # the token left the address bar
        assert served("feed") == served("coupon") == VERSIONS[-1]
        card = driver.find_element(By.ID, "card-coupon").text
        assert "quickstart" in card and "wide_deep" in card, card
        # the card's links into MLflow's UI: the registered model and the training runs
        mlflow = json.loads((workdir / "quickstart.json").read_text())["endpoints"]["mlflow"]
        registry = driver.find_element(By.CSS_SELECTOR, "#card-coupon a.registry")
        assert registry.get_attribute("href") == f"{mlflow}/#/models/elasticctr-coupon"
        runs = driver.find_element(By.CSS_SELECTOR, "#card-coupon a.runs").get_attribute("href")
        exp = httpx.get(f"{mlflow}/api/2.0/mlflow/experiments/get-by-name",
                        params={"experiment_name": "elasticctr-coupon"}).json()  # fmt: skip
        assert runs == f"{mlflow}/#/experiments/{exp['experiment']['experiment_id']}", runs
        assert httpx.get(f"{mlflow}/api/2.0/mlflow/registered-models/get",
                         params={"name": "elasticctr-coupon"}).status_code == 200  # fmt: skip
        driver.save_screenshot(str(shots / "scenarios.png"))

        driver.find_element(By.ID, "card-coupon").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#versions tbody tr")) == 2)
        cells = [r.find_elements(By.TAG_NAME, "td")[1].text
                 for r in driver.find_elements(By.CSS_SELECTOR, "#versions tbody tr")]  # fmt: skip
        assert all(0.5 < float(c) < 1 for c in cells), cells  # each version's held-out AUC
        driver.save_screenshot(str(shots / "versions.png"))
        driver.find_element(By.ID, "rollback").click()
        wait.until(
            lambda d: f"now serves {VERSIONS[0]}" in d.find_element(By.ID, "detail-message").text
        )
        wait.until(lambda d: served("coupon") == VERSIONS[0])
        assert served("feed") == VERSIONS[-1]
        wait.until(lambda d: "rollback" in d.find_element(By.ID, "audit").text)
        driver.save_screenshot(str(shots / "rolled-back.png"))
        driver.find_element(By.ID, "unpin").click()
        wait.until(lambda d: served("coupon") == VERSIONS[-1])
        audit = driver.find_element(By.ID, "audit").text
        assert "admin" in audit and "unpin" in audit and "rollback " + VERSIONS[0] in audit, audit
        # Training runs in the quickstart's own process here: pausing is refused, said why.
        driver.find_element(By.ID, "training").click()
        wait.until(
            lambda d: (
                "refused: scenario coupon: the local platform trains"
                in d.find_element(By.ID, "detail-message").text
            )
        )
        # Removing asks for the name typed again; the local platform refuses, said why.
        remove = driver.find_element(By.ID, "remove")
        driver.find_element(By.ID, "remove-confirm").send_keys("coupo")
        assert not remove.is_enabled()
        driver.find_element(By.ID, "remove-confirm").send_keys("n")
        assert remove.is_enabled()
        remove.click()
        wait.until(
            lambda d: (
                "refused: scenario coupon: the local platform's scenarios"
                in d.find_element(By.ID, "detail-message").text
            )
        )
        assert served("coupon") == VERSIONS[-1]
        _new_scenario(driver, wait, workdir, tmp_path, shots)

        # A fresh session without the token: the sign-in form; a wrong token is refused.
        driver.delete_all_cookies()
        driver.execute_script("sessionStorage.clear()")
        driver.get(base)
        wait.until(lambda d: d.find_element(By.ID, "login").is_displayed())
        driver.find_element(By.ID, "token").send_keys("guess")
        driver.find_element(By.CSS_SELECTOR, "#login button").click()
        wait.until(lambda d: "not accepted" in d.find_element(By.ID, "login-error").text)
        assert not driver.find_elements(By.CSS_SELECTOR, ".card")
    finally:
        driver.quit()
    entries = [
        json.loads(line) for line in (workdir / "console-audit.jsonl").read_text().splitlines()
    ]
    assert [(e["user"], e["action"], e["outcome"][:7]) for e in entries] == [
        ("admin", "rollback", "done"),
        ("admin", "unpin", "done"),
        ("admin", "pause", "refused"),
        ("admin", "remove", "refused"),
        ("admin", "add", "refused"),
    ], entries
    assert entries[-1]["scenario"] == "campaign"
    assert entries[-1]["detail"]["values"]["trainer"]["model"]["name"] == "deepfm"
    assert all(p.stat().st_size > 10_000 for p in shots.glob("*.png"))


def _new_scenario(driver, wait, workdir: Path, tmp_path: Path, shots: Path) -> None:
    """The new-scenario form (docs/console.md): a path with no data is named beside its
    field; the quickstart's feed data profiled fills in slots, first hour and model; a bad
    name, a name taken and a slot the data lacks show beside their fields; YAML edited by
    hand comes back into the form; adding is refused by the local platform, said why."""
    from selenium.webdriver.common.by import By
    from tests.browser import Form

    form = Form(driver)
    field, error, retype = form.field, form.error, form.put

    driver.find_element(By.ID, "new-open").click()
    wait.until(lambda d: d.find_elements(By.ID, "f-global.data.path"))
    field("global.data.path").send_keys(f"file://{tmp_path}/no-data-here")
    driver.find_element(By.ID, "new-profile").click()
    wait.until(lambda d: "not found" in error("global.data.path"))
    retype("global.data.path", f"file://{workdir / 'data' / 'feed'}")
    driver.find_element(By.ID, "new-profile").click()
    wait.until(lambda d: field("global.data.slots").get_attribute("value") != "")
    assert field("global.data.slots").get_attribute("value") == ", ".join(map(str, range(16)))
    assert field("global.data.startDateHour").get_attribute("value") == "20200401/00"
    assert field("trainer.model.name").get_attribute("value") in ("lr", "deepfm")
    assert error("global.data.path") == ""
    field("global.scenario.name").send_keys("Campaign!")
    wait.until(lambda d: "does not match" in error("global.scenario.name"))
    retype("global.scenario.name", "coupon")
    wait.until(lambda d: "exists already" in error("global.scenario.name"))
    retype("global.scenario.name", "campaign")
    retype("global.data.slots", "0, 1, 99")
    wait.until(lambda d: "99 never occur" in error("global.data.slots"))
    assert error("global.scenario.name") == ""
    driver.save_screenshot(str(shots / "new-scenario.png"))
    retype("global.data.slots", "0, 1, 2, 3, 4, 5, 6, 7")
    wait.until(lambda d: "no problems" in d.find_element(By.ID, "new-state").text)
    # YAML edited by hand comes back into the form
    text = driver.find_element(By.ID, "new-yaml").get_attribute("value")
    assert "name: campaign" in text and "slots: [0, 1, 2, 3, 4, 5, 6, 7]" in text, text
    model = field("trainer.model.name").get_attribute("value")
    driver.execute_script(
        "arguments[0].value = arguments[1]",
        driver.find_element(By.ID, "new-yaml"),
        text.replace(f"name: {model}", "name: deepfm") + "  pserver: {replicas: 0}\n",
    )
    driver.find_element(By.ID, "new-yaml-apply").click()
    wait.until(lambda d: field("trainer.model.name").get_attribute("value") == "deepfm")
    wait.until(lambda d: error("trainer.pserver.replicas") != "")
    assert field("trainer.pserver.replicas").get_attribute("value") == "0"
    retype("trainer.pserver.replicas", "1")
    wait.until(lambda d: "no problems" in d.find_element(By.ID, "new-state").text)
    driver.find_element(By.ID, "new-submit").click()
    wait.until(
        lambda d: (
            "not added: scenario campaign: the local platform trains"
            in d.find_element(By.ID, "new-message").text
        )
    )
    assert not driver.find_elements(By.ID, "card-campaign")


def _check_scenario(workdir, name: str, report: dict, tracked: dict, serving: str) -> None:
    """What the quickstart guarantees for each scenario."""
    store = workdir / "store" / "scenarios" / name
    # Two training hours exported into the scenario's own prefix of the model store; the
    # newest one is what the one serving process answers with on the scenario's route.
    assert report["store"] == str(store)
    assert report["versions"] == VERSIONS
    assert report["served_version"] == VERSIONS[-1]
    assert report["heldout"] == "20200401/02"
    assert report["predict_url"] == f"{serving}/v1/scenarios/{name}/predict"
    assert report["latency_ms_p50"] > 0
    manifests = {v: json.loads((store / "versions" / v / "manifest.json").read_text())
                 for v in VERSIONS}  # fmt: skip
    assert all(m["model"]["name"] == report["model"] for m in manifests.values()), manifests
    assert all(m["slots"] == report["slots"] for m in manifests.values()), manifests
    # Elastic training: both trainers trained, and every training line not held out (the
    # hash rule every trainer skips) was counted exactly once by the coordinator.
    assert sorted(report["trainer_samples"]) == ["0", "1"], report["trainer_samples"]
    assert all(n > 0 for n in report["trainer_samples"].values()), report["trainer_samples"]
    trained = _trained(workdir, name, VERSIONS)
    assert sum(report["trainer_samples"].values()) == report["samples"] == trained["lines"]
    assert report["tasks"] >= 2 * 2  # each hour split into several tasks
    # Every export holds every row trained before it (the static launcher's could miss the
    # last sparse pushes); version 00's may hold more: hour 01 trains while it exports.
    # Nothing trains after the newest one, so it holds exactly the trained feasigns.
    rows = {v: m["sparse"]["rows"] for v, m in manifests.items()}
    assert rows[VERSIONS[0]] >= trained["feasigns"][VERSIONS[0]], (rows, trained)
    assert rows[VERSIONS[1]] == trained["feasigns"][VERSIONS[1]], (rows, trained)
    # MLflow (read back from the server while it ran) holds the scenario's training run
    # in its own experiment, with its per-partition metrics and the quickstart's final
    # figures, in an experiment of the model-training kind (the printed link opens that
    # view), and both versions in the scenario's own registered model.
    assert tracked["experiment"] == report["mlflow_experiment"] == f"elasticctr-{name}"
    assert tracked["run_id"] == report["mlflow_run"]
    assert {"auc", "logloss"} <= set(tracked["metrics"])
    assert tracked["metrics"]["heldout_auc"] == pytest.approx(report["auc"])
    assert tracked["metrics"]["heldout_logloss"] == pytest.approx(report["logloss"])
    assert tracked["metrics"]["oracle_auc"] == pytest.approx(report["oracle_auc"])
    assert tracked["kind"] == C.MLFLOW_EXPERIMENT_KIND
    assert report["mlflow_run_url"].endswith(
        f"/#/experiments/{tracked['experiment_id']}/runs/{report['mlflow_run']}?{C.MLFLOW_UI_QUERY}"
    )
    assert report["mlflow_registered_model"] == f"elasticctr-{name}"
    assert tracked["registered"] == VERSIONS, tracked


def _mlflow_readback(workdir) -> dict:
    """Per scenario, from the quickstart's MLflow server: its experiment's one run (id,
    metrics), the experiment's kind, and the versions of its registered model."""
    from mlflow.tracking import MlflowClient

    state = json.loads((workdir / "local.json").read_text())
    client = MlflowClient(state["endpoints"]["mlflow"])
    experiments = [e for e in client.search_experiments() if e.name != "Default"]
    assert sorted(e.name for e in experiments) == ["elasticctr-coupon", "elasticctr-feed"]
    found = {}
    for experiment in experiments:
        name = experiment.name.removeprefix("elasticctr-")
        (run,) = client.search_runs([experiment.experiment_id])
        registered = client.search_model_versions(f"name = '{experiment.name}'")
        found[name] = {
            "experiment": experiment.name,
            "run_id": run.info.run_id,
            "metrics": run.data.metrics,
            "experiment_id": experiment.experiment_id,
            "kind": experiment.tags.get(C.MLFLOW_EXPERIMENT_KIND_TAG),
            "registered": sorted(v.tags.get(C.MLFLOW_TAG_VERSION) for v in registered),
        }
    return found


def _trained(workdir, name: str, hours: list[str]) -> dict:
    """Read here from the scenario's files: the training hours' lines minus the held-out
    ones, and per hour the distinct feasigns trained up to and including it."""
    import numpy as np

    from elasticctr.train import config
    from elasticctr.train.elastic import _read, heldout_mask, take

    cfg = config.load(workdir / f"values.{name}.yaml")
    lines = held = 0
    seen: set[int] = set()
    feasigns = {}
    for hour in hours:
        for path in sorted((workdir / "data" / name / hour).glob("part-*")):
            lines += sum(1 for ln in path.read_bytes().split(b"\n") if ln.strip())
            for batch in _read(cfg, f"file://{path}"):
                mask = heldout_mask(batch)
                held += int(mask.sum())
                for ids in take(batch, ~mask).ids:
                    seen.update(np.asarray(ids).tolist())
        feasigns[hour] = len(seen)
    assert lines > 0
    return {"lines": lines - held, "feasigns": feasigns}


def test_local_status_without_deployment_is_a_clear_error(tmp_path):
    proc = subprocess.run(
        [*ECTL, "local", "status", "--workdir", str(tmp_path)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "no local deployment" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_quickstart_refuses_bad_scenario_names_before_starting_anything(tmp_path):
    proc = subprocess.run(
        [*ECTL, "quickstart", "--workdir", str(tmp_path / "qs"), "--scenarios", "feed,feed"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "--scenarios: scenario 'feed' is named twice" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "qs").exists()
    # The other checks, in this process (run_quickstart plans before it creates anything).
    from elasticctr.errors import EctlError
    from elasticctr.local.quickstart import QuickstartOptions, plan_scenarios

    for names, message in [
        (("Feed", "coupon"), "--scenarios: 'Feed' is not a valid scenario name"),
        (("feed", "a_b"), "--scenarios: 'a_b' is not a valid scenario name"),
        (("default",), "'default' is the single release's scenario"),
        (("a", "b", "c"), "expected one or two scenario names, got 3"),
    ]:
        opts = QuickstartOptions(workdir=tmp_path / "qs", values={}, scenarios=names)
        with pytest.raises(EctlError, match=re.escape(message)):
            plan_scenarios(opts)
    plans = plan_scenarios(QuickstartOptions(workdir=tmp_path, values={}, scenarios=("solo",)))
    assert [(p.name, p.model) for p in plans] == [("solo", "dnn")]
