"""Console: how fast the scenario list of a big platform renders in a real browser.

The console's server (elasticctr.console.server, the same code `ectl console` runs) over a
platform of `--scenarios` generated scenarios (status rows as `scenarios.status_row` makes
them, each with two versions and a serving histogram of traffic), opened in Debian's
Chromium through chromium-driver (headless). Each round loads the page fresh and measures,
in the page's own clock, from navigation start until every card is in the document
(`performance.now()` when the last card exists), and the server's time for
`/api/scenarios`. Rounds are repeated; medians with min-max; the goal (issue 28) is under
1 s for 50 scenarios.

    .venv/bin/python bench/console/render.py [--scenarios 50] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from elasticctr import scenarios
from elasticctr.console.server import Audit, ConsoleServer, Users

GOAL_S = 1.0
TOKEN = "bench-token"


class GeneratedPlatform:
    """Status data of `n` scenarios in the shapes the real backends return."""

    platform = "generated"

    def __init__(self, n: int):
        teams = ["growth", "content", "ads", "search"]
        self._registered = {
            f"scenario-{i:03d}": scenarios.Scenario(
                f"scenario-{i:03d}", team=teams[i % 4], model=["lr", "dnn", "wide_deep"][i % 3],
                slots=tuple(range(8 + i % 20)),
            )
            for i in range(n)
        }  # fmt: skip
        self._calls = 0

    def registered(self) -> dict[str, scenarios.Scenario]:
        return self._registered

    def scenarios(self) -> list[dict[str, Any]]:
        rows = []
        for i, (name, sc) in enumerate(sorted(self._registered.items())):
            served = {"version": f"20261204/{i % 24:02d}", "heldout_auc": 0.7 + (i % 9) / 100,
                      "error": "cube_unavailable" if i % 17 == 0 else None}  # fmt: skip
            stored = {"newestVersion": f"20261204/{(i + 1) % 24:02d}", "error": None}
            trainer = {"name": "trainer", "minAvailable": 1, "replicas": 4}
            running = {"trainer": {"phase": {"Running": 2}}}
            job = {
                "spec": {"queue": sc.team, "tasks": [trainer]},
                "status": {"state": {"phase": "Running"}, "taskStatusCount": running},
            }
            rows.append(scenarios.status_row(name, sc, served, stored, job))
        return rows

    def serving_metrics(self) -> list[str]:
        self._calls += 1
        reg = CollectorRegistry()
        h = Histogram("elasticctr_serving_predict_seconds", "x", ["scenario"], registry=reg)
        for i, name in enumerate(self._registered):
            for _ in range(self._calls * (1 + i % 5)):
                h.labels(name).observe(0.002 + (i % 7) / 1000)
        return [generate_latest(reg).decode()]

    def versions(self, name: str) -> dict[str, Any]:
        raise NotImplementedError  # not on the list page

    rollback_target = pin = unpin = versions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenarios", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    load0 = os.getloadavg()[0]
    with TemporaryDirectory() as tmp:
        server = ConsoleServer(
            ("127.0.0.1", 0), GeneratedPlatform(args.scenarios), Users(TOKEN),
            Audit(Path(tmp) / "audit.jsonl"),
        ).start()  # fmt: skip
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        page, api = [], []
        try:
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                r = httpx.get(f"{server.url}/api/scenarios", timeout=30,
                              headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
                api.append(time.perf_counter() - t0)
                assert len(r.json()["scenarios"]) == args.scenarios
                driver.get("about:blank")
                driver.get(f"{server.url}/#token={TOKEN}")
                WebDriverWait(driver, 30, poll_frequency=0.01).until(
                    lambda d: len(d.find_elements(By.CSS_SELECTOR, ".card")) == args.scenarios
                )
                # The page's clock: navigation start -> now (all cards are in the document).
                page.append(driver.execute_script("return performance.now()") / 1000)
        finally:
            driver.quit()
            server.stop()
    print(f"machine: {os.cpu_count()} cores; load average {load0:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end")  # fmt: skip
    for what, values in (("page: navigation to every card", page), ("GET /api/scenarios", api)):
        lo, hi = min(values) * 1000, max(values) * 1000
        print(f"{what}: median {statistics.median(values) * 1000:.0f} ms ({lo:.0f}-{hi:.0f}), "
              f"{len(values)} rounds")  # fmt: skip
    print(f"ratio: goal / page render median, {args.scenarios} scenarios = "
          f"{GOAL_S / statistics.median(page):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
