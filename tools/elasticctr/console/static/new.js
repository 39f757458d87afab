// ElasticCTR console: a new scenario from a data path, without writing YAML. The form is
// generated from the chart's values schema (GET /api/new/form); every change is checked by
// the server with `ectl validate`'s rules and shown beside its field; the YAML it makes is
// shown, editable and downloadable, and installs as `ectl scenario add NAME -f` would.
// Uses app.js's token, el(), $() and refresh().
"use strict";

let newForm = null;    // {sections: [{path, schema, default}]}
let newValues = {};    // the scenario's values file, as an object
let checkTimer = null;
let pathProblems = []; // the data path's, from its last profile: kept until it changes

function getAt(obj, path) {
  let cur = obj;
  for (const k of path.split(".")) {
    if (cur === null || typeof cur !== "object" || !(k in cur)) return undefined;
    cur = cur[k];
  }
  return cur;
}

function setAt(obj, path, value) {
  const keys = path.split(".");
  const trail = [obj];
  let cur = obj;
  for (const k of keys.slice(0, -1)) {
    if (cur[k] === null || typeof cur[k] !== "object") cur[k] = {};
    cur = cur[k];
    trail.push(cur);
  }
  const last = keys[keys.length - 1];
  if (value === undefined) {
    delete cur[last];
    for (let i = keys.length - 1; i > 0; i--) { // drop objects left empty
      if (Object.keys(trail[i]).length) break;
      delete trail[i - 1][keys[i - 1]];
    }
  } else {
    cur[last] = value;
  }
}

// `over`'s values into `into` (objects merged key by key, anything else replaced).
function overlay(into, over) {
  for (const [k, v] of Object.entries(over)) {
    if (v !== null && typeof v === "object" && !Array.isArray(v)
        && into[k] !== null && typeof into[k] === "object" && !Array.isArray(into[k])) {
      overlay(into[k], v);
    } else {
      into[k] = v;
    }
  }
  return into;
}

function shown(value) {
  if (value === undefined || value === null) return "";
  if (Array.isArray(value)) return value.join(", ");
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function kindOf(schema) {
  if (schema.enum) return "enum";
  if (schema.type === "boolean") return "boolean";
  if (schema.type === "integer" || schema.type === "number") return "number";
  if (schema.type === "array") return "array";
  if (schema.type === "object" && schema.properties) return "object";
  if (schema.type === "object") return "json";
  return "text";
}

// The text of an input -> the value the schema wants (left as text when it is not one:
// the server's check says what is wrong, as `ectl validate` would).
function parse(schema, text) {
  const t = text.trim();
  if (t === "") return undefined;
  const kind = kindOf(schema);
  if (kind === "number" || (kind === "enum" && typeof schema.enum[0] === "number")) {
    const n = Number(t);
    return Number.isFinite(n) ? n : t;
  }
  if (kind === "boolean") return t === "true";
  if (kind === "array") {
    const items = t.split(",").map((s) => s.trim()).filter((s) => s !== "");
    const numeric = schema.items && (schema.items.type === "integer" || schema.items.type === "number");
    return items.map((s) => (numeric && Number.isFinite(Number(s)) ? Number(s) : s));
  }
  if (kind === "json") {
    try { return JSON.parse(t); } catch (e) { return t; }
  }
  return t;
}

function field(path, schema, dflt) {
  const kind = kindOf(schema);
  const name = path.split(".").pop();
  if (kind === "object") {
    const box = el("fieldset", { class: "group", "data-path": path },
      el("legend", { title: schema.description || "" }, name));
    if (schema.description) box.append(el("p", { class: "help" }, schema.description));
    for (const [k, sub] of Object.entries(schema.properties)) {
      box.append(field(`${path}.${k}`, sub, dflt && typeof dflt === "object" ? dflt[k] : undefined));
    }
    box.append(el("p", { class: "field-error", id: `e-${path}`, role: "alert" }));
    return box;
  }
  let input;
  if (kind === "enum" || kind === "boolean") {
    const options = kind === "enum" ? schema.enum : [true, false];
    const label = dflt === undefined || dflt === null ? "(default)" : `(default: ${shown(dflt)})`;
    input = el("select", {}, el("option", { value: "" }, label),
      ...options.map((o) => el("option", { value: String(o) }, String(o))));
  } else {
    input = el("input", { type: "text", autocomplete: "off", spellcheck: "false",
      placeholder: dflt === undefined ? "" : shown(dflt) });
  }
  input.id = `f-${path}`;
  input.dataset.path = path;
  input.value = shown(getAt(newValues, path));
  input.addEventListener(kind === "enum" || kind === "boolean" ? "change" : "input", () => {
    if (path === "global.data.path") pathProblems = [];
    setAt(newValues, path, parse(schema, input.value));
    scheduleCheck();
  });
  const row = el("div", { class: "field" },
    el("label", { for: input.id, title: schema.description || "" }, name), input,
    el("span", { class: "help" }, schema.description || ""),
    el("p", { class: "field-error", id: `e-${path}`, role: "alert" }));
  if (path === "global.data.path") {
    const btn = el("button", { type: "button", id: "new-profile" }, "Profile a sample");
    btn.addEventListener("click", profileData);
    row.insertBefore(btn, row.children[2]);
  }
  return row;
}

function renderForm() {
  const form = $("new-form");
  form.replaceChildren(...newForm.sections.map((s) => field(s.path, s.schema, s.default)));
}

function fillForm() {
  document.querySelectorAll("#new-form [data-path]").forEach((input) => {
    if (input.tagName === "FIELDSET") return;
    input.value = shown(getAt(newValues, input.dataset.path));
  });
}

// Each problem beside the field it names (or the nearest section shown); the rest above.
function showProblems(problems) {
  document.querySelectorAll("#new .field-error").forEach((p) => { p.textContent = ""; });
  document.querySelectorAll("#new .invalid").forEach((n) => n.classList.remove("invalid"));
  const general = [];
  for (const p of [...pathProblems, ...(problems || [])]) {
    let path = p.path === "(yaml)" ? "yaml" : p.path;
    let target = path ? $(`e-${path}`) : null;
    while (!target && path && path.includes(".")) {
      path = path.slice(0, path.lastIndexOf("."));
      target = $(`e-${path}`);
    }
    if (!target) { general.push(p.path ? `${p.path}: ${p.message}` : p.message); continue; }
    target.textContent = (target.textContent ? target.textContent + " " : "") + p.message;
    const input = $(`f-${path}`);
    if (input) input.classList.add("invalid");
  }
  $("new-problems").replaceChildren(...general.map((m) => el("li", {}, m)));
  $("new-submit").disabled = false;
}

function scheduleCheck() {
  clearTimeout(checkTimer);
  checkTimer = setTimeout(checkValues, 300);
}

async function post(path, body) {
  const resp = await fetch(path, {
    method: "POST", body: JSON.stringify(body),
    headers: { "Authorization": `Bearer ${token}`, "Content-Type": "application/json" },
  });
  let doc = null;
  try { doc = await resp.json(); } catch (e) { doc = null; }
  return { status: resp.status, doc: doc || {} };
}

async function checkValues() {
  const { status, doc } = await post("/api/new/check", { values: newValues });
  if (status !== 200) { $("new-message").textContent = (doc.error || {}).message || `HTTP ${status}`; return; }
  if (document.activeElement !== $("new-yaml")) $("new-yaml").value = doc.yaml || "";
  showProblems(doc.problems);
  $("new-state").textContent = doc.problems.length
    ? `${doc.problems.length} problem(s)` : "no problems: ready to add";
}

async function applyYaml() {
  const { status, doc } = await post("/api/new/check", { yaml: $("new-yaml").value });
  if (status !== 200) { $("new-message").textContent = (doc.error || {}).message || `HTTP ${status}`; return; }
  if (doc.values) { newValues = doc.values; fillForm(); }
  showProblems(doc.problems);
  $("new-state").textContent = doc.problems.length
    ? `${doc.problems.length} problem(s)` : "no problems: ready to add";
}

async function profileData() {
  const path = $("f-global.data.path").value.trim();
  $("new-message").textContent = `profiling a sample of ${path} ...`;
  // read as the scenario's HDFS user when one is set (permissions on: the console's own
  // user may not see a team's data)
  const hdfsUgi = getAt(newValues, "global.data.hdfsUgi") || undefined;
  const { status, doc } = await post("/api/new/profile", { path, hdfsUgi });
  if (status !== 200) {
    $("new-message").textContent = "";
    pathProblems = doc.problems || [{ path: "", message: (doc.error || {}).message || `HTTP ${status}` }];
    await checkValues();
    return;
  }
  pathProblems = [];
  // the sample's suggestions over what the user set already (a previous path's first
  // hour goes: a single file suggests none)
  setAt(newValues, "global.data.startDateHour", undefined);
  overlay(newValues, doc.values);
  fillForm();
  const p = doc.profile;
  $("new-message").textContent =
    `${p.samples} samples read${p.truncated ? " (a sample)" : ""}, CTR ${num(p.ctr * 100, 2)} %, ` +
    `${p.hours.length} ready hour(s)${p.hours.length ? ` from ${p.hours[0]}` : ""}; slots ` +
    `${p.recommendation.slots.join(", ")} recommended, model ${getAt(newValues, "trainer.model.name")} suggested`;
  $("new-slots").tBodies[0].replaceChildren(...p.slots.map((s) => el("tr", {},
    el("td", {}, String(s.slot)), el("td", {}, `${num(s.coverage * 100, 1)} %`),
    el("td", {}, String(s.cardinality)), el("td", {}, num(s.ctr_when_present * 100, 2)),
    el("td", {}, p.recommendation.slots.includes(s.slot) ? "yes" : (p.recommendation.dropped[s.slot] || "-")))));
  $("new-slots").hidden = false;
  await checkValues();
}

async function submitScenario() {
  $("new-submit").disabled = true;
  const name = getAt(newValues, "global.scenario.name") || "";
  $("new-message").textContent = `adding scenario ${name} ...`;
  const { status, doc } = await post("/api/scenarios", { values: newValues });
  $("new-submit").disabled = false;
  if (status === 200) {
    closeNew();
    $("notice").textContent = `added scenario ${doc.scenario}: its job is starting; its card shows it`;
    await refresh();
    return;
  }
  $("new-message").textContent = `not added: ${(doc.error || {}).message || `HTTP ${status}`}`;
  showProblems(doc.problems || []);
}

function downloadYaml() {
  const name = getAt(newValues, "global.scenario.name") || "scenario";
  const link = el("a", {
    href: URL.createObjectURL(new Blob([$("new-yaml").value], { type: "application/yaml" })),
    download: `${name}.yaml`,
  });
  document.body.append(link);
  link.click();
  link.remove();
}

async function openNew() {
  $("new").hidden = false;
  $("new-message").textContent = "";
  if (!newForm) {
    const resp = await fetch("/api/new/form", { headers: { "Authorization": `Bearer ${token}` } });
    newForm = await resp.json();
  }
  renderForm();
  await checkValues();
}

function closeNew() {
  $("new").hidden = true;
  newValues = {};
  pathProblems = [];
  $("new-yaml").value = "";
  $("new-slots").hidden = true;
}

$("new-open").addEventListener("click", openNew);
$("new-cancel").addEventListener("click", closeNew);
$("new-yaml-apply").addEventListener("click", applyYaml);
$("new-download").addEventListener("click", downloadYaml);
$("new-submit").addEventListener("click", submitScenario);
