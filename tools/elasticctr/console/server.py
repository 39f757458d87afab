"""The console's HTTP server: the browser app (static files) and its JSON API.

  GET  /                      the app (static/index.html; static/app.js, new.js, app.css)
  GET  /healthz               200 while the process runs
  GET  /api/me                who the token is: {"user", "teams"} (401 without one)
  GET  /api/scenarios         {"platform", "scenarios": [status row + "qps", "p99_ms",
                              "mlflow": {"registry", "runs"} links into MLflow's UI]}:
                              the caller's teams' scenarios (`scenarios.status_row`)
  GET  /api/scenarios/NAME/versions
                              cube-transfer's versions of NAME (store, retained,
                              committed, pinned, failed) and what serving answers with
  POST /api/scenarios/NAME/pin      {"version"}: serve it, nothing newer until unpinned
  POST /api/scenarios/NAME/rollback {}: pin the newest complete version older than the
                              committed one
  POST /api/scenarios/NAME/unpin    {}: follow the newest again
  POST /api/scenarios/NAME/pause    {}: stop its training (Volcano's AbortJob, as `ectl
                              scenario pause`); serving keeps its model
  POST /api/scenarios/NAME/resume   {}: train again from the last exported hour
  POST /api/scenarios/NAME/remove   {"confirm": NAME}: `ectl scenario remove NAME` (its
                              versions stay in the store and MLflow)
  GET  /api/audit             the changes made through the console, newest first
                              (the caller's teams' scenarios)
  GET  /api/new/form          the new-scenario form: the chart schema's sections and
                              their defaults (elasticctr.console.newscenario)
  POST /api/new/profile       {"path", "hdfsUgi"?}: profile a sample of the data (read
                              as that HDFS user when given) -> suggested values, their
                              YAML and the profile
  POST /api/new/check         {"yaml"} or {"values"}: the values, their YAML and every
                              problem `ectl validate` finds ({"path", "message"} each)
  POST /api/scenarios         {"yaml"} or {"values"}: check them (schema, team, name, data
                              path and slots against a sample) and install the scenario
                              (`ectl scenario add NAME -f` of that YAML); 422 with the
                              problems, nothing installed

Every /api route needs `Authorization: Bearer <token>`: the administrator token
($ELASTICCTR_CONSOLE_TOKEN, every team) or a token of the users file (`--users`: a YAML
list of {user, token, teams}). A scenario of another team is 404, as if absent. Every
change is appended to the audit log (JSON lines: at, user, action, scenario, detail,
outcome) before its answer. Served by the threaded front end of elasticctr.httpd.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import yaml

from elasticctr import constants as C
from elasticctr.console import newscenario
from elasticctr.console.traffic import Traffic
from elasticctr.errors import EctlError, ValidationError
from elasticctr.httpd import HardenedHandler, Limits, ThreadedServer
from elasticctr.values import dig, split_problem

log = logging.getLogger("elasticctr.console")

ALL_TEAMS = "*"
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/static/new.js": ("new.js", "text/javascript; charset=utf-8"),
    "/static/app.css": ("app.css", "text/css; charset=utf-8"),
}
_SCENARIO_ROUTE = re.compile(
    r"^/api/scenarios/([a-z][-a-z0-9]*)/(versions|pin|rollback|unpin|pause|resume|remove)$"
)
AUDIT_SHOWN = 200
MAX_BODY = 64 << 10
"""Largest request body: a scenario's values file."""


class Backend(Protocol):
    """The platform as the console reads and changes it (elasticctr.cli.console makes one:
    the local platform, or a release on Kubernetes)."""

    platform: str

    def registered(self) -> dict[str, Any]: ...

    def scenarios(self) -> list[dict[str, Any]]: ...

    def versions(self, name: str) -> dict[str, Any]: ...

    def rollback_target(self, name: str) -> str: ...

    def pin(self, name: str, version: str) -> dict[str, Any]: ...

    def unpin(self, name: str) -> dict[str, Any]: ...

    def set_training(self, name: str, paused: bool) -> dict[str, Any]: ...

    def remove(self, name: str) -> dict[str, Any]: ...

    def serving_metrics(self) -> list[str]: ...

    def layers(self, name: str) -> tuple[dict[str, Any], dict[str, Any]]: ...

    def add(self, name: str, values_yaml: str) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Principal:
    user: str
    teams: tuple[str, ...]

    def sees(self, team: str) -> bool:
        return ALL_TEAMS in self.teams or team in self.teams


class Users:
    """Tokens -> principals: the administrator token and the users file's."""

    def __init__(self, admin_token: str | None, users: list[Principal | tuple] | None = None):
        self._by_token: dict[str, Principal] = {}
        if admin_token:
            self._by_token[admin_token] = Principal("admin", (ALL_TEAMS,))
        for token, principal in users or []:
            self._by_token[token] = principal
        if not self._by_token:
            raise EctlError(
                "the console needs a token",
                hint=f"set ${C.ENV_CONSOLE_TOKEN} or pass --users FILE",
            )

    @classmethod
    def from_file(cls, admin_token: str | None, path: Path | None) -> Users:
        if path is None:
            return cls(admin_token)
        try:
            doc = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise EctlError(f"users file {path}: {exc}") from exc
        if not isinstance(doc, list):
            raise EctlError(f"users file {path}: expected a list of {{user, token, teams}}")
        users = []
        for i, entry in enumerate(doc):
            ok = isinstance(entry, dict) and all(
                isinstance(entry.get(k), str) and entry.get(k) for k in ("user", "token")
            )
            teams = entry.get("teams") if isinstance(entry, dict) else None
            if not ok or not isinstance(teams, list) or not all(isinstance(t, str) for t in teams):
                raise EctlError(
                    f"users file {path}: entry {i}: expected user and token (strings) and "
                    f'teams (a list of team names, or ["*"] for every team)'
                )
            users.append((entry["token"], Principal(entry["user"], tuple(teams))))
        return cls(admin_token, users)

    def find(self, header: str | None) -> Principal | None:
        if not header or not header.startswith("Bearer "):
            return None
        given = header[len("Bearer ") :].encode()
        for token, principal in self._by_token.items():
            if hmac.compare_digest(given, token.encode()):
                return principal
        return None


class Audit:
    """Append-only JSON lines of every change (who, when, what, outcome)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def record(self, user: str, action: str, scenario: str, detail: dict, outcome: str) -> None:
        entry = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "user": user,
            "action": action,
            "scenario": scenario,
            "detail": detail,
            "outcome": outcome,
        }
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self._lock, open(self.path, "a+b") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell():  # a line torn by a crash mid-write keeps to itself
                fh.seek(-1, os.SEEK_END)
                torn = fh.read(1) != b"\n"
                fh.seek(0, os.SEEK_END)
                if torn:
                    fh.write(b"\n")
            fh.write(line.encode())
            fh.flush()
            os.fsync(fh.fileno())

    def read(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a torn last line (a crash mid-write) is skipped, not fatal
        return out


class MlflowLinks:
    """Links into MLflow's web UI at `ui` (the address the browser reaches it at): each
    scenario's registered model (its versions, each with its training run) and its
    experiment (the runs), the experiment's id asked of MLflow's REST API once."""

    RETRY_SECONDS = 30.0
    """After a miss (no run logged yet, or MLflow unreachable) the id is asked again only
    this much later: the cards refresh every 5 s, each scenario would cost a request."""

    def __init__(self, ui: str | None):
        self.ui = ui.rstrip("/") if ui else None
        self._ids: dict[str, str] = {}
        self._missed: dict[str, float] = {}  # name -> when to ask again

    def _experiment_id(self, name: str) -> str | None:
        if name in self._ids:
            return self._ids[name]
        if time.monotonic() < self._missed.get(name, 0.0):
            return None
        import httpx

        try:
            r = httpx.get(
                f"{self.ui}/api/2.0/mlflow/experiments/get-by-name",
                params={"experiment_name": name},
                timeout=5,
            )
            r.raise_for_status()
            self._ids[name] = r.json()["experiment"]["experiment_id"]
        except (httpx.HTTPError, ValueError, KeyError):
            self._missed[name] = time.monotonic() + self.RETRY_SECONDS
            return None
        return self._ids[name]

    def of(self, name: str) -> dict[str, str]:
        """{"registry", "runs"} URLs of scenario `name` (what is known)."""
        if not self.ui:
            return {}
        from elasticctr import scenarios

        links = {"registry": f"{self.ui}/#/models/{scenarios.registered_model_name(name)}"}
        exp = self._experiment_id(scenarios.experiment_name(name))
        if exp is not None:
            links["runs"] = f"{self.ui}/#/experiments/{exp}"
        return links


class ConsoleServer(ThreadedServer):
    def __init__(
        self,
        address: tuple[str, int],
        backend: Backend,
        users: Users,
        audit: Audit,
        mlflow_ui: str | None = None,
    ):
        self.backend = backend
        self.users = users
        self.audit = audit
        self.mlflow = MlflowLinks(mlflow_ui)
        self.traffic = Traffic()
        self.profiles = newscenario.Profiles()
        super().__init__(address, _Handler, Limits.from_env(max_body_bytes=MAX_BODY))

    def start(self, name: str = "console") -> ConsoleServer:
        return super().start(name)


def _static(name: str) -> bytes:
    return resources.files("elasticctr.console").joinpath("static", name).read_bytes()


class _Handler(HardenedHandler):
    server: ConsoleServer

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        if path in STATIC:
            name, ctype = STATIC[path]
            return self.send_json(200, _static(name), ctype)
        if path == "/healthz":
            return self.send_json(200, {"ok": True})
        who = self._principal()
        if who is None:
            return
        if path == "/api/me":
            return self.send_json(200, {"user": who.user, "teams": list(who.teams)})
        if path == "/api/scenarios":
            return self._guarded(lambda: self._scenarios(who))
        if path == "/api/audit":
            mine = {n for n, sc in self.server.backend.registered().items() if who.sees(sc.team)}
            shown = [
                e
                for e in reversed(self.server.audit.read())
                if e.get("scenario") in mine or ALL_TEAMS in who.teams
            ]
            return self.send_json(200, {"entries": shown[:AUDIT_SHOWN]})
        if path == "/api/new/form":
            return self._guarded(lambda: (200, newscenario.form()))
        m = _SCENARIO_ROUTE.match(path)
        if m and m.group(2) == "versions":
            return self._guarded(lambda: self._versions(who, m.group(1)))
        self.send_json_error(404, "not_found", f"no such endpoint {path}")

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        m = _SCENARIO_ROUTE.match(path)
        new = path in _NEW_ROUTES
        if not new and (not m or m.group(2) == "versions"):
            return self.send_json_error(404, "not_found", f"no such endpoint {path}")
        who = self._principal()
        if who is None:
            return
        raw = self.read_body(MAX_BODY)
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            return self.send_json_error(400, "bad_request", f"body is not JSON: {exc}")
        if not isinstance(body, dict):
            return self.send_json_error(400, "bad_request", "body must be a JSON object")
        if new:
            return self._guarded(lambda: _NEW_ROUTES[path](self, who, body))
        name, action = m.group(1), m.group(2)
        if not self._visible(who, name):
            return self.send_json_error(404, "not_found", f"no scenario {name}")
        self._guarded(lambda: self._change(who, name, action, body))

    # --- routes ---------------------------------------------------------------------
    def _scenarios(self, who: Principal) -> tuple[int, Any]:
        backend = self.server.backend
        rows = [r for r in backend.scenarios() if who.sees(r["team"])]
        traffic = self.server.traffic.update(backend.serving_metrics())
        for r in rows:
            t = traffic.get(r["name"], {})
            r["qps"], r["p99_ms"] = t.get("qps"), t.get("p99_ms")
            r["mlflow"] = self.server.mlflow.of(r["name"])
        return 200, {"platform": backend.platform, "scenarios": rows, "user": who.user}

    def _versions(self, who: Principal, name: str) -> tuple[int, Any]:
        if not self._visible(who, name):
            return 404, _error("not_found", f"no scenario {name}")
        return 200, self.server.backend.versions(name)

    def _change(self, who: Principal, name: str, action: str, body: dict) -> tuple[int, Any]:
        backend = self.server.backend
        detail: dict[str, Any] = {}
        try:
            if action == "unpin":
                done = backend.unpin(name)
            elif action in ("pause", "resume"):
                done = backend.set_training(name, paused=action == "pause")
            elif action == "remove":
                if body.get("confirm") != name:
                    return 400, _error(
                        "bad_request", f"type the scenario's name ({name}) to confirm its removal"
                    )
                done = backend.remove(name)
            else:
                version = body.get("version")
                if action == "rollback" and version is None:
                    version = backend.rollback_target(name)
                if not isinstance(version, str):
                    return 400, _error("bad_request", "'version' (YYYYMMDD/HH) is required")
                detail["version"] = version
                done = backend.pin(name, version)
        except EctlError as exc:
            self.server.audit.record(who.user, action, name, detail, f"refused: {exc.message}")
            raise
        self.server.audit.record(who.user, action, name, {**detail, **done}, "done")
        return 200, done

    # --- a new scenario -------------------------------------------------------------
    def _profile(self, who: Principal, body: dict) -> tuple[int, Any]:
        path = body.get("path")
        if not isinstance(path, str) or not path.strip():
            return 422, _problems("no data path", ["global.data.path: give the data's URL"])
        path = path.strip()
        hdfs_ugi = body.get("hdfsUgi")
        if hdfs_ugi is not None and not isinstance(hdfs_ugi, str):
            return 422, _problems("bad HDFS user", ["global.data.hdfsUgi: give user,password"])
        try:
            prof = self.server.profiles.get(path, hdfs_ugi or None)
        except EctlError as exc:
            return 422, _problems(exc.message, [f"global.data.path: {exc.message}"])
        values = newscenario.suggest(path, prof)
        if len(who.teams) == 1 and who.teams[0] != ALL_TEAMS:
            values["global"]["scenario"] = {"team": who.teams[0]}
        summary = {k: prof[k] for k in ("lines", "samples", "ctr", "truncated", "hours")}
        summary["slots"] = [
            {k: sl[k] for k in ("slot", "coverage", "cardinality", "ctr_when_present")}
            for sl in prof["slots"]
        ]
        summary["recommendation"] = prof["recommendation"]
        summary["malformed"] = {k: prof["malformed"][k] for k in ("lines", "rate", "reasons")}
        return 200, {"values": values, "yaml": newscenario.dump_yaml(values), "profile": summary}

    def _read_values(self, body: dict) -> dict[str, Any]:
        if isinstance(body.get("yaml"), str):
            return newscenario.parse_yaml(body["yaml"])
        values = body.get("values", {})
        if not isinstance(values, dict):
            raise ValidationError("values", problems=["(yaml): values must be a mapping"])
        return values

    def _problems_of(self, who: Principal, values: dict[str, Any]) -> list[str]:
        """Every problem `ectl scenario add` would find before installing, without the
        cluster's own checks (those come with the install)."""
        name = dig(values, "global.scenario.name") or ""
        problems = []
        if not name:
            problems.append("global.scenario.name: the new scenario needs a name")
        base, own = self.server.backend.layers(name or "unnamed")
        problems += newscenario.check(values, base, own)
        team = dig(values, "global.scenario.team") or ""
        if not who.sees(team):
            problems.append(
                f"global.scenario.team: {who.user} adds scenarios of team(s) "
                f"{', '.join(who.teams)} only"
            )
        if name and name in self.server.backend.registered():
            problems.append(f"global.scenario.name: a scenario named {name} exists already")
        return problems

    def _check(self, who: Principal, body: dict) -> tuple[int, Any]:
        try:
            values = self._read_values(body)
        except ValidationError as exc:
            return 200, {"values": None, "problems": [split_problem(p) for p in exc.problems]}
        problems = self._problems_of(who, values)
        path = dig(values, "global.data.path") or ""
        ugi = _hdfs_ugi(values)
        prof = self.server.profiles.cached(path, ugi) if isinstance(path, str) else None
        if prof is not None:  # slots against the sample profiled already (no new read)
            problems += newscenario.data_problems(values, prof)
        return 200, {
            "values": values,
            "yaml": newscenario.dump_yaml(values),
            "problems": [split_problem(p) for p in problems],
        }

    def _create(self, who: Principal, body: dict) -> tuple[int, Any]:
        try:
            values = self._read_values(body)
        except ValidationError as exc:
            return 422, _problems(exc.message, exc.problems)
        name = dig(values, "global.scenario.name") or ""
        problems = self._problems_of(who, values)
        path = dig(values, "global.data.path") or ""
        if path and not any(p.startswith("global.data.path:") for p in problems):
            try:
                prof = self.server.profiles.get(path, _hdfs_ugi(values))
                problems += newscenario.data_problems(values, prof)
            except EctlError as exc:
                problems.append(f"global.data.path: {exc.message}")
        detail = {"values": newscenario.redacted(values)}
        if problems:
            self.server.audit.record(
                who.user, "add", name, detail, f"refused: {len(problems)} problem(s)"
            )
            return 422, _problems(f"scenario {name or '(unnamed)'} not added", problems)
        text = newscenario.dump_yaml(values)
        try:
            done = self.server.backend.add(name, text)
        except ValidationError as exc:
            self.server.audit.record(who.user, "add", name, detail, f"refused: {exc.message}")
            return 422, _problems(exc.message, exc.problems)
        except EctlError as exc:
            self.server.audit.record(who.user, "add", name, detail, f"refused: {exc.message}")
            raise
        self.server.audit.record(who.user, "add", name, detail, "done")
        return 200, {**done, "yaml": text}

    # --- helpers --------------------------------------------------------------------
    def _visible(self, who: Principal, name: str) -> bool:
        sc = self.server.backend.registered().get(name)
        return sc is not None and who.sees(sc.team)

    def _principal(self) -> Principal | None:
        who = self.server.users.find(self.headers.get("Authorization"))
        if who is None:
            self.send_json_error(
                401, "unauthorized", "send 'Authorization: Bearer <console token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )  # fmt: skip
        return who

    def _guarded(self, fn) -> None:
        try:
            status, doc = fn()
        except EctlError as exc:
            status = getattr(exc, "status", None) or 502
            code = {404: "not_found", 409: "not_switched", 401: "refused"}.get(status, "failed")
            return self.send_json_error(status if status != 401 else 502, code, exc.message)
        self.send_json(status, doc)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _hdfs_ugi(values: dict[str, Any]) -> str | None:
    """The scenario's HDFS_UGI (its data is read as that user), if the values set one."""
    ugi = dig(values, "global.data.hdfsUgi")
    return ugi if isinstance(ugi, str) and ugi.strip() else None


def _problems(message: str, problems: list[str]) -> dict[str, Any]:
    """A 422 answer: the message and every problem beside its field ({"path", "message"})."""
    return {
        "error": {"code": "invalid", "message": message},
        "problems": [split_problem(p) for p in problems],
    }


_NEW_ROUTES = {
    "/api/new/profile": _Handler._profile,
    "/api/new/check": _Handler._check,
    "/api/scenarios": _Handler._create,
}
