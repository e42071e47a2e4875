// kafka-py console: a page over the REST API (/api). No build step, no external resources.
"use strict";

const view = document.getElementById("view");
let info = { read_only: true, bootstrap_servers: "" };
let refreshTimer = null;

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
const dash = (v) => (v === null || v === undefined ? "-" : esc(v));
const ids = (list) => esc((list || []).join(","));

async function api(path, options = {}) {
  const response = await fetch("/api" + path, {
    headers: { "content-type": "application/json" },
    ...options,
  });
  if (response.status === 204) return null;
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = body.error || (body.detail && JSON.stringify(body.detail)) || response.statusText;
    throw new Error(detail);
  }
  return body;
}

function showError(err) {
  view.innerHTML = `<p class="error" id="error">${esc(err.message || err)}</p>`;
}

function table(id, headers, rows) {
  const head = headers.map((h) => `<th class="${h.num ? "num" : ""}">${esc(h.label)}</th>`).join("");
  const body = rows.map((r) => `<tr>${r.map((c, i) =>
    `<td class="${headers[i].num ? "num" : ""}">${c}</td>`).join("")}</tr>`).join("");
  return `<table id="${id}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
}

function card(label, value, id, bad) {
  return `<div class="card"><div class="muted">${esc(label)}</div>
    <div class="value ${bad ? "status-bad" : ""}" id="${id}">${esc(value)}</div></div>`;
}

// ---- overview ----------------------------------------------------------------------------
async function renderOverview() {
  const c = await api("/cluster");
  const zones = new Map();
  const zoneOf = (z) => {
    const key = z || "(no zone)";
    if (!zones.has(key)) zones.set(key, { storage: [], gateways: [] });
    return zones.get(key);
  };
  c.storage_nodes.forEach((n) => zoneOf(n.zone).storage.push(n));
  c.gateways.forEach((g) => zoneOf(g.zone).gateways.push(g));
  const zoneCards = [...zones.entries()].sort().map(([zone, z]) => `
    <div class="zone" data-zone="${esc(zone)}"><h3>Zone ${esc(zone)}</h3>
      ${z.storage.map((n) => `<div class="node storage-node" data-node="${n.id}">
        <span class="dot ${n.live ? "up" : "down"}" title="${n.live ? "registered" : "down"}"></span>
        storage ${n.id} <span class="muted">${dash(n.address)} · ${n.leaders} leaders ·
        ${n.replicas} replicas</span></div>`).join("")}
      ${z.gateways.map((g) => `<div class="node gateway" data-gateway="${g.id}">
        <span class="dot up"></span> gateway ${g.id} <span class="muted">${esc(g.address)}</span>
      </div>`).join("")}
    </div>`).join("");
  view.innerHTML = `<h1 id="overview">Cluster overview</h1>
    <div class="cards">
      ${card("Active controller", c.controller_id ?? "none", "controller", c.controller_id === null)}
      ${card("Storage nodes up", `${c.storage_nodes.filter((n) => n.live).length} / ${c.storage_nodes.length}`, "nodes-up")}
      ${card("Topics", c.topics, "topic-count")}
      ${card("Partitions", c.partitions, "partition-count")}
      ${card("Under-replicated", c.under_replicated_partitions, "urp", c.under_replicated_partitions > 0)}
      ${card("Offline", c.offline_partitions, "offline", c.offline_partitions > 0)}
    </div>
    <h2>Nodes by zone</h2><div class="cards" id="zones">${zoneCards}</div>`;
}

// ---- topics ------------------------------------------------------------------------------
async function renderTopics() {
  const topics = await api("/topics");
  const rows = topics.map((t) => [
    `<a href="#/topics/${encodeURIComponent(t.name)}">${esc(t.name)}</a>${t.internal ? ' <span class="muted">internal</span>' : ""}`,
    t.partitions, t.replication_factor,
    `<span class="${t.under_replicated_partitions ? "status-bad" : "status-ok"}">${t.under_replicated_partitions}</span>`,
    `<span class="${t.offline_partitions ? "status-bad" : "status-ok"}">${t.offline_partitions}</span>`,
  ]);
  const create = info.read_only ? "" : `
    <form class="inline" id="create-topic">
      <label>Name <input name="name" required pattern="[a-zA-Z0-9._-]+"></label>
      <label>Partitions <input name="partitions" type="number" min="1" value="3"></label>
      <label>Replication factor <input name="rf" type="number" min="1" value="3"></label>
      <button type="submit">Create topic</button> <span id="create-result"></span>
    </form>`;
  view.innerHTML = `<h1>Topics</h1>${create}${table("topics-table", [
    { label: "Topic" }, { label: "Partitions", num: true }, { label: "RF", num: true },
    { label: "Under-replicated", num: true }, { label: "Offline", num: true }], rows)}`;
  const form = document.getElementById("create-topic");
  if (form) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const f = new FormData(form);
      try {
        await api("/topics", { method: "POST", body: JSON.stringify({
          name: f.get("name"), partitions: Number(f.get("partitions")),
          replication_factor: Number(f.get("rf")) }) });
        location.hash = `#/topics/${encodeURIComponent(f.get("name"))}`;
      } catch (err) {
        document.getElementById("create-result").innerHTML = `<span class="error">${esc(err.message)}</span>`;
      }
    });
  }
}

async function renderTopic(name) {
  const t = await api(`/topics/${encodeURIComponent(name)}`);
  const parts = t.partitions.map((p) => [
    p.partition, dash(p.leader), ids(p.replicas), ids(p.isr),
    dash(p.earliest_offset), dash(p.latest_offset),
    p.leader === null ? '<span class="status-bad">offline</span>'
      : p.under_replicated ? '<span class="status-bad">under-replicated</span>'
        : '<span class="status-ok">in sync</span>',
  ]);
  const configs = t.configs.filter((c) => !c.is_default).map((c) => [
    `<code>${esc(c.name)}</code>`, `<code>${dash(c.value)}</code>`, esc(c.source)]);
  const options = t.partitions.map((p) => `<option value="${p.partition}">${p.partition}</option>`).join("");
  const produce = info.read_only ? "" : `
    <h2>Produce a test record</h2>
    <form class="inline" id="produce">
      <label>Partition <select name="partition"><option value="">(partitioner)</option>${options}</select></label>
      <label>Key <input name="key"></label>
      <label>Value <input name="value" required></label>
      <button type="submit">Produce</button> <span id="produce-result"></span>
    </form>`;
  view.innerHTML = `<h1>Topic <span id="topic-name">${esc(t.name)}</span></h1>
    <p class="muted">id ${dash(t.topic_id)}${t.marked_for_deletion ? " · marked for deletion" : ""}</p>
    <h2>Partitions</h2>${table("partitions-table", [
      { label: "Partition", num: true }, { label: "Leader", num: true }, { label: "Replicas" },
      { label: "ISR" }, { label: "Earliest", num: true }, { label: "Latest", num: true },
      { label: "Status" }], parts)}
    <h2>Configs overridden</h2>${configs.length ? table("configs-table",
      [{ label: "Name" }, { label: "Value" }, { label: "Source" }], configs)
      : '<p class="muted">none (all defaults)</p>'}
    <h2>Records</h2>
    <form class="inline" id="browse">
      <label>Partition <select name="partition">${options}</select></label>
      <label>From offset <input name="offset" type="number" min="0" placeholder="earliest"></label>
      <label>or from time <input name="time" type="datetime-local"></label>
      <label>Max <input name="limit" type="number" min="1" value="50"></label>
      <button type="submit">Show records</button>
    </form>
    <div id="records"></div>${produce}`;
  document.getElementById("browse").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    const q = new URLSearchParams({ limit: f.get("limit") || "50" });
    if (f.get("time")) q.set("timestamp", String(new Date(f.get("time")).getTime()));
    else if (f.get("offset")) q.set("offset", f.get("offset"));
    const out = document.getElementById("records");
    try {
      const page = await api(`/topics/${encodeURIComponent(name)}/partitions/${f.get("partition")}/records?${q}`);
      const rows = page.records.map((r) => [r.offset, new Date(r.timestamp).toISOString(),
        `<code>${dash(r.key)}</code>`, `<code>${dash(r.value)}</code>`,
        r.headers.map((h) => `${esc(h.key)}=${dash(h.value)}`).join(", ")]);
      out.innerHTML = `<p class="muted">offsets ${page.start_offset}–${page.next_offset - 1} of log end ${page.log_end_offset}</p>` +
        table("records-table", [{ label: "Offset", num: true }, { label: "Timestamp" },
          { label: "Key" }, { label: "Value" }, { label: "Headers" }], rows);
    } catch (err) {
      out.innerHTML = `<p class="error">${esc(err.message)}</p>`;
    }
  });
  const form = document.getElementById("produce");
  if (form) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const f = new FormData(form);
      const body = { key: f.get("key") || null, value: f.get("value") };
      if (f.get("partition") !== "") body.partition = Number(f.get("partition"));
      const out = document.getElementById("produce-result");
      try {
        const r = await api(`/topics/${encodeURIComponent(name)}/records`, { method: "POST", body: JSON.stringify(body) });
        out.textContent = `written at ${r.topic}-${r.partition}@${r.offset}`;
      } catch (err) {
        out.innerHTML = `<span class="error">${esc(err.message)}</span>`;
      }
    });
  }
}

// ---- groups ------------------------------------------------------------------------------
async function renderGroups() {
  const groups = await api("/groups");
  const rows = groups.map((g) => [
    `<a href="#/groups/${encodeURIComponent(g.group)}">${esc(g.group)}</a>`, esc(g.state)]);
  view.innerHTML = `<h1>Consumer groups</h1>${table("groups-table",
    [{ label: "Group" }, { label: "State" }], rows)}`;
}

function lagChart(samples) {
  const w = 640, h = 180, pad = 36;
  if (!samples.length) return "";
  const t0 = samples[0].time, t1 = samples[samples.length - 1].time;
  const max = Math.max(1, ...samples.map((s) => s.lag));
  const x = (t) => pad + (t1 === t0 ? 0 : ((t - t0) / (t1 - t0)) * (w - 2 * pad));
  const y = (v) => h - pad + 10 - (v / max) * (h - 2 * pad);
  let points = samples.map((s) => `${x(s.time).toFixed(1)},${y(s.lag).toFixed(1)}`).join(" ");
  if (samples.length === 1) points = `${pad},${y(samples[0].lag)} ${w - pad},${y(samples[0].lag)}`;
  return `<svg class="chart" id="lag-chart" width="${w}" height="${h}" role="img"
      aria-label="total lag over time">
    <text x="4" y="${y(max) + 4}">${max}</text><text x="4" y="${y(0) + 4}">0</text>
    <text x="${pad}" y="${h - 4}">${new Date(t0 * 1000).toLocaleTimeString()}</text>
    <text x="${w - pad - 60}" y="${h - 4}">${new Date(t1 * 1000).toLocaleTimeString()}</text>
    <polyline points="${points}"></polyline></svg>`;
}

async function renderGroup(name) {
  const g = await api(`/groups/${encodeURIComponent(name)}`);
  const rows = g.offsets.map((o) => [esc(o.topic), o.partition, dash(o.current_offset),
    o.log_end_offset, dash(o.lag), dash(o.consumer_id), dash(o.host), dash(o.client_id)]);
  view.innerHTML = `<h1>Group <span id="group-name">${esc(g.group)}</span></h1>
    <div class="cards">
      ${card("State", g.state, "group-state")}
      ${card("Members", g.members.length, "group-members")}
      ${card("Total lag", g.total_lag, "group-lag-total", g.total_lag > 0)}
      ${card("Coordinator", g.coordinator, "group-coordinator")}
    </div>
    <h2>Lag over time</h2>${lagChart(g.lag_history)}
    <p class="muted">${g.lag_history.length} samples (taken while the group is being watched)</p>
    <h2>Offsets</h2>${table("group-offsets", [{ label: "Topic" }, { label: "Partition", num: true },
      { label: "Current offset", num: true }, { label: "Log end", num: true }, { label: "Lag", num: true },
      { label: "Consumer id" }, { label: "Host" }, { label: "Client id" }], rows)}`;
}

// ---- routing -----------------------------------------------------------------------------
const routes = [
  [/^#?\/?$/, renderOverview, "overview"],
  [/^#\/topics$/, renderTopics, "topics"],
  [/^#\/topics\/(.+)$/, renderTopic, "topics"],
  [/^#\/groups$/, renderGroups, "groups"],
  [/^#\/groups\/(.+)$/, renderGroup, "groups"],
];

async function route() {
  clearInterval(refreshTimer);
  const hash = location.hash || "#/";
  for (const [pattern, render, nav] of routes) {
    const m = hash.match(pattern);
    if (!m) continue;
    document.querySelectorAll("[data-nav]").forEach((a) =>
      a.classList.toggle("active", a.dataset.nav === nav));
    const args = m.slice(1).map(decodeURIComponent);
    const draw = () => render(...args).catch(showError);
    await draw();
    // live views refresh themselves; pages with forms do not (it would eat the input)
    if (render === renderOverview || render === renderGroup) refreshTimer = setInterval(draw, 5000);
    return;
  }
  showError(new Error(`no page ${hash}`));
}

async function start() {
  try {
    info = await api("/info");
  } catch (err) {
    showError(err);
    return;
  }
  const mode = document.getElementById("mode");
  mode.textContent = info.read_only ? "read-only" : "read-write";
  mode.classList.toggle("ro", info.read_only);
  document.getElementById("bootstrap").textContent = info.bootstrap_servers;
  window.addEventListener("hashchange", route);
  await route();
}

start();
