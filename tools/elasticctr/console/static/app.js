// ElasticCTR console: the scenario cards, a scenario's versions and the audit log, from the
// console's JSON API (elasticctr.console.server). No framework, no build step.
"use strict";

const REFRESH_MS = 5000;
const STALE_SECONDS = 3 * 3600; // as the ElasticCTRModelStale alert's default
let token = null;
let openScenario = null;
let lastRows = {}; // the scenario rows of the last refresh, by name

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c === null || c === undefined ? "" : c);
  return node;
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  if (seconds < 0) return "ahead";
  const m = Math.floor(seconds / 60), h = Math.floor(seconds / 3600), d = Math.floor(seconds / 86400);
  if (d) return `${d}d ${h % 24}h`;
  if (h) return `${h}h ${m % 60}m`;
  return `${m}m`;
}

function num(v, digits) { return v === null || v === undefined ? "-" : Number(v).toFixed(digits); }

async function api(path, options) {
  const resp = await fetch(path, {
    ...(options || {}),
    headers: { "Authorization": `Bearer ${token}`, "Content-Type": "application/json" },
  });
  let body = null;
  try { body = await resp.json(); } catch (e) { body = null; }
  if (resp.status === 401) { showLogin("The token was not accepted."); throw new Error("unauthorized"); }
  if (!resp.ok) {
    const msg = body && body.error ? body.error.message : `HTTP ${resp.status}`;
    throw new Error(msg);
  }
  return body;
}

function showLogin(message) {
  token = null;
  sessionStorage.removeItem("elasticctr-token");
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

function card(r) {
  const failing = r.error || r.store_error;
  const stale = r.freshness_seconds !== null && r.freshness_seconds > STALE_SECONDS;
  const node = el("article", {
    class: "card" + (failing ? " failing" : stale ? " stale" : ""),
    id: `card-${r.name}`, "data-served": r.served || "", tabindex: "0",
  },
    el("h3", {}, r.name),
    el("dl", {},
      el("dt", {}, "team"), el("dd", {}, r.team),
      el("dt", {}, "model"), el("dd", {}, r.model),
      el("dt", {}, "hour trained"), el("dd", {}, r.trained || "-"),
      el("dt", {}, "version served"), el("dd", { class: "served" }, r.served || "-"),
      el("dt", {}, "freshness"), el("dd", {}, age(r.freshness_seconds)),
      el("dt", {}, "held-out AUC"), el("dd", {}, num(r.heldout_auc, 4)),
      el("dt", {}, "QPS / p99"), el("dd", {}, `${num(r.qps, 1)} / ${num(r.p99_ms, 1)} ms`),
      el("dt", {}, "trainers r/min/max"), el("dd", {}, r.trainers),
      el("dt", {}, "job / queue"), el("dd", {}, `${r.job} / ${r.queue}`),
    ),
  );
  const mlflow = r.mlflow || {};
  if (mlflow.registry || mlflow.runs) {
    const links = el("p", { class: "links" });
    if (mlflow.registry) links.append(el("a", { href: mlflow.registry, target: "_blank", rel: "noopener", class: "registry" }, "MLflow registry"));
    if (mlflow.runs) links.append(" · ", el("a", { href: mlflow.runs, target: "_blank", rel: "noopener", class: "runs" }, "training runs"));
    links.addEventListener("click", (ev) => ev.stopPropagation()); // a link, not the card
    node.append(links);
  }
  if (r.paused) node.append(el("p", { class: "paused" }, "training paused"));
  if (failing) node.append(el("p", { class: "err" }, r.error || r.store_error));
  node.addEventListener("click", () => openDetail(r.name));
  return node;
}

async function refresh() {
  if (!token) return;
  try {
    const doc = await api("/api/scenarios");
    $("platform").textContent = `platform ${doc.platform}`;
    $("user").textContent = `signed in as ${doc.user}`;
    lastRows = Object.fromEntries(doc.scenarios.map((r) => [r.name, r]));
    $("cards").replaceChildren(...doc.scenarios.map(card));
    $("updated").textContent = `updated ${new Date().toISOString().slice(11, 19)} UTC`;
    $("error").hidden = true;
    const audit = await api("/api/audit");
    $("audit").tBodies[0].replaceChildren(...audit.entries.map((e) => el("tr", {},
      el("td", {}, e.at), el("td", {}, e.user),
      el("td", {}, e.action + (e.detail && e.detail.version ? ` ${e.detail.version}` : "")),
      el("td", {}, e.scenario), el("td", {}, e.outcome))));
    if (openScenario) await showVersions(openScenario);
  } catch (e) {
    if (e.message !== "unauthorized") { $("error").textContent = e.message; $("error").hidden = false; }
  }
}

async function showVersions(name) {
  const v = await api(`/api/scenarios/${name}/versions`);
  const served = new Set(Object.values(v.serving || {}));
  $("detail-title").textContent = `${name}: model versions`;
  $("detail-state").textContent = v.pinned
    ? `pinned on ${v.pinned}: newer versions wait until you follow the newest again`
    : `following the newest version (committed ${v.committed || "none"})`;
  $("unpin").disabled = !v.pinned;
  const paused = (lastRows[name] || {}).paused;
  $("training").dataset.action = paused ? "resume" : "pause";
  $("training").textContent = paused ? "Resume training" : "Pause training";
  const all = [...new Set([...v.store, ...v.retained, ...Object.keys(v.failed)])].sort().reverse();
  $("versions").tBodies[0].replaceChildren(...all.map((ver) => {
    const state = [];
    if (ver === v.committed) state.push("committed");
    if (ver === v.pinned) state.push("pinned");
    if (served.has(ver)) state.push("served");
    if (v.failed[ver]) state.push(`rejected: ${v.failed[ver]}`);
    const pin = el("button", { type: "button", "data-version": ver, class: "pin" }, "Pin");
    pin.disabled = !v.store.includes(ver) || ver === v.pinned;
    pin.addEventListener("click", () => change(name, "pin", { version: ver }));
    const m = (v.metrics || {})[ver] || {};
    return el("tr", { "data-version": ver },
      el("td", {}, ver), el("td", {}, num(m.auc, 4)), el("td", {}, num(m.logloss, 4)),
      el("td", {}, m.samples_chief === undefined ? "-" : String(m.samples_chief)),
      el("td", {}, v.store.includes(ver) ? "yes" : "-"),
      el("td", {}, v.retained.includes(ver) ? "yes" : "-"), el("td", {}, state.join(", ")),
      el("td", {}, pin));
  }));
}

async function openDetail(name) {
  openScenario = name;
  $("detail").hidden = false;
  $("detail-message").textContent = "";
  $("remove-confirm").value = "";
  $("remove").disabled = true;
  try { await showVersions(name); } catch (e) { $("detail-message").textContent = e.message; }
}

async function change(name, action, body) {
  const buttons = document.querySelectorAll("#detail button");
  buttons.forEach((b) => { b.disabled = true; });
  $("detail-message").textContent = `${action} ...`;
  try {
    const done = await api(`/api/scenarios/${name}/${action}`, {
      method: "POST", body: JSON.stringify(body || {}),
    });
    if (action === "remove") {
      openScenario = null;
      $("detail").hidden = true;
      $("notice").textContent = `removed scenario ${name} (its versions stay in the store)`;
      return;
    }
    $("detail-message").textContent = action === "unpin"
      ? `following the newest version again (was pinned on ${done.was || "none"})`
      : action === "pause" || action === "resume"
        ? `${name}: training ${action === "pause" ? "paused" : "resumed"} (job ${done.phase})`
        : `${name} now serves ${done.committed} (was ${done.previous || "none"})`;
  } catch (e) {
    $("detail-message").textContent = `refused: ${e.message}`;
  } finally {
    buttons.forEach((b) => { b.disabled = false; });
    $("remove").disabled = $("remove-confirm").value !== openScenario;
    await refresh();
  }
}

$("rollback").addEventListener("click", () => change(openScenario, "rollback", {}));
$("unpin").addEventListener("click", () => change(openScenario, "unpin", {}));
$("training").addEventListener("click", () => change(openScenario, $("training").dataset.action, {}));
$("remove-confirm").addEventListener("input", () => {
  $("remove").disabled = $("remove-confirm").value !== openScenario;
});
$("remove").addEventListener("click", () =>
  change(openScenario, "remove", { confirm: $("remove-confirm").value }));
$("close").addEventListener("click", () => { openScenario = null; $("detail").hidden = true; });
$("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("token").value;
  sessionStorage.setItem("elasticctr-token", token);
  $("login").hidden = true;
  refresh();
});

const fromLink = new URLSearchParams(location.hash.slice(1)).get("token");
if (fromLink) {
  sessionStorage.setItem("elasticctr-token", fromLink);
  history.replaceState(null, "", location.pathname); // the token leaves the address bar
}
token = sessionStorage.getItem("elasticctr-token");
if (token) refresh(); else showLogin("");
setInterval(refresh, REFRESH_MS);
