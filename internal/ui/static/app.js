// The kvserve dashboard: polls GET /v1/admin/dashboard once a second and
// draws what it returns. No framework and no build step: plain DOM and
// hand-drawn SVG. The admin key comes from the address's fragment
// (/ui#key=sk-…, never sent to the server) or the login form and is kept
// in this tab's sessionStorage only.
"use strict";

const API = "/v1/admin/dashboard";
const POLL_MS = 1000;
const KEY_ITEM = "kvserve-admin-key";
const SVG = "http://www.w3.org/2000/svg";
const CLASS_COLORS = {
  pinned: "#7c3aed", persistent: "#2563eb", session: "#0891b2", default: "#64748b", ephemeral: "#f59e0b",
};

let timer = null;

// ---- the key ----

function takeKeyFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const key = params.get("key");
  if (key) {
    sessionStorage.setItem(KEY_ITEM, key);
    // Out of the address bar (and the history) at once.
    history.replaceState(null, "", location.pathname + location.search);
  }
}

function key() { return sessionStorage.getItem(KEY_ITEM) || ""; }

function show(id, on) { document.getElementById(id).hidden = !on; }

function setStatus(state, text) {
  const s = document.getElementById("status");
  s.dataset.state = state;
  s.textContent = text;
}

// ---- polling ----

async function poll() {
  clearTimeout(timer);
  const headers = {};
  if (key()) headers.Authorization = "Bearer " + key();
  let resp;
  try {
    resp = await fetch(API, { headers, cache: "no-store" });
  } catch (e) {
    setStatus("error", "server unreachable: " + e.message);
    timer = setTimeout(poll, POLL_MS * 3);
    return;
  }
  if (resp.status === 401 && !key()) {
    // A server with keys: ask for one.
    show("board", false); show("refused", false); show("login", true);
    setStatus("login", "admin key needed");
    return;
  }
  if (resp.status === 401 || resp.status === 403) {
    let msg = "";
    try { msg = (await resp.json()).error.message; } catch (_) { /* not JSON */ }
    refuse(resp.status, msg);
    return;
  }
  if (!resp.ok) {
    setStatus("error", "dashboard error " + resp.status);
    timer = setTimeout(poll, POLL_MS * 3);
    return;
  }
  const snap = await resp.json();
  show("login", false); show("refused", false); show("board", true);
  document.getElementById("logout").hidden = !key();
  render(snap);
  // When the numbers shown were read (the browser test waits on it).
  document.body.dataset.snapshot = snap.time;
  setStatus("live", "live · updated " + new Date(snap.time).toLocaleTimeString());
  timer = setTimeout(poll, POLL_MS);
}

function refuse(status, message) {
  show("board", false); show("login", false); show("refused", true);
  const what = status === 403 ? "This key is not an admin key: the server refused it (403)."
    : "The server did not accept this key (401).";
  document.getElementById("refused-status").textContent = what;
  document.getElementById("refused-status").dataset.status = String(status);
  document.getElementById("refused-message").textContent = message;
  setStatus("refused", "refused (" + status + ")");
}

// ---- formatting ----

const nf = new Intl.NumberFormat("en-US");
function int(v) { return v == null ? "–" : nf.format(Math.round(v)); }
function pct(v) { return v == null ? "–" : (100 * v).toFixed(1) + "%"; }
function rate(v) { return v == null ? "–" : v < 10 ? v.toFixed(2) : nf.format(Math.round(v)); }
function secs(v) {
  if (v == null) return "–";
  if (v < 1) return +(v * 1000).toPrecision(3) + " ms";
  return +v.toPrecision(3) + " s";
}
function ago(t) {
  const s = (new Date(t) - Date.now()) / 1000;
  const a = Math.abs(s);
  const txt = a < 90 ? Math.round(a) + " s" : a < 5400 ? Math.round(a / 60) + " min" : (a / 3600).toFixed(1) + " h";
  return s >= 0 ? "in " + txt : txt + " ago";
}

// metric sets an element's text and its raw value (data-value), which the
// browser test reads.
function metric(name, value, text) {
  for (const el of document.querySelectorAll('[data-metric="' + name + '"]')) {
    el.textContent = text;
    el.dataset.value = value == null ? "" : String(value);
  }
}

// ---- rendering ----

function render(s) {
  const t = s.traffic;
  metric("requests", t.requests, int(t.requests));
  metric("requests-per-second", t.requests_per_second, rate(t.requests_per_second));
  metric("in-flight", t.in_flight, int(t.in_flight));
  metric("running", t.running, int(t.running));
  metric("waiting", t.waiting, int(t.waiting));
  metric("prompt-tokens", t.prompt_tokens, int(t.prompt_tokens));
  metric("cached-tokens", t.cached_tokens, int(t.cached_tokens));
  metric("generated-tokens", t.generated_tokens, int(t.generated_tokens));
  metric("tokens-per-second", t.tokens_per_second, rate(t.tokens_per_second));
  metric("hit-rate", s.hit_rate.overall, pct(s.hit_rate.overall));
  metric("hit-rate-minute", s.hit_rate.last_minute, pct(s.hit_rate.last_minute));
  metric("hit-window", s.hit_rate.window_seconds, Math.round(s.hit_rate.window_seconds) + " s");

  drawHistory(document.getElementById("chart-history"), s.history || []);
  drawHistogram(document.getElementById("chart-ttft"), s.ttft, "ttft");
  drawHistogram(document.getElementById("chart-itl"), s.itl, "itl");
  drawTiers(document.getElementById("chart-tiers"), s.tiers || []);
  drawPool(document.getElementById("chart-pool"), s.pool);

  renderCaches(s.caches);
  renderSessions(s.sessions);
  renderCosts(s.costs);
  renderWorkers(s.workers);
}

function el(tag, attrs, parent, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function clear(svg) { while (svg.firstChild) svg.removeChild(svg.firstChild); }

function empty(svg, msg) {
  el("text", { x: 210, y: 85, class: "empty", "text-anchor": "middle" }, svg, msg);
}

// drawHistory: the last minute's hit rate (left axis, 0–100%) and tokens/s
// (right axis), one point per poll interval.
function drawHistory(svg, pts) {
  clear(svg);
  const W = 420, H = 170, L = 36, R = 44, T = 10, B = 22;
  const w = W - L - R, h = H - T - B;
  el("line", { x1: L, y1: T + h, x2: L + w, y2: T + h, class: "axis" }, svg);
  for (const f of [0, 0.5, 1]) {
    const y = T + h - f * h;
    el("line", { x1: L, y1: y, x2: L + w, y2: y, class: "grid" }, svg);
    el("text", { x: L - 4, y: y + 4, "text-anchor": "end", class: "tick" }, svg, (f * 100) + "%");
  }
  if (pts.length < 2) { empty(svg, "collecting (one point a second)…"); return; }
  const t0 = new Date(pts[0].t).getTime(), t1 = new Date(pts[pts.length - 1].t).getTime();
  const span = Math.max(t1 - t0, 1);
  const x = (p) => L + ((new Date(p.t).getTime() - t0) / span) * w;
  const maxTps = Math.max(1, ...pts.map((p) => p.tokens_per_second));
  el("text", { x: L + w + 4, y: T + 4, class: "tick" }, svg, rate(maxTps));
  el("text", { x: L + w + 4, y: T + h + 4, class: "tick" }, svg, "0");
  el("text", { x: L, y: H - 6, class: "tick" }, svg, "-" + Math.round(span / 1000) + " s");
  el("text", { x: L + w, y: H - 6, "text-anchor": "end", class: "tick" }, svg, "now");
  let tps = "";
  for (const p of pts) tps += (tps ? "L" : "M") + x(p).toFixed(1) + "," + (T + h - (p.tokens_per_second / maxTps) * h).toFixed(1);
  el("path", { d: tps, class: "line tps" }, svg);
  let hit = "";
  let pen = "M";
  for (const p of pts) {
    if (p.hit_rate == null) { pen = "M"; continue; }
    hit += pen + x(p).toFixed(1) + "," + (T + h - p.hit_rate * h).toFixed(1);
    pen = "L";
  }
  if (hit) el("path", { d: hit, class: "line hit" }, svg);
}

// drawHistogram: one bar per bucket up to the last one with observations.
function drawHistogram(svg, hist, name) {
  clear(svg);
  const q = document.querySelector('[data-metric="' + name + '-quantiles"]');
  if (!hist) { q.textContent = ""; empty(svg, "no engine on this server"); return; }
  q.textContent = "p50 " + secs(hist.p50) + " · p90 " + secs(hist.p90) + " · p99 " + secs(hist.p99) + " · n=" + int(hist.count);
  q.dataset.value = String(hist.count);
  if (hist.count === 0) { empty(svg, "no request yet"); return; }
  const buckets = hist.buckets.map((b) => ({ label: "≤" + secs(b.le), count: b.count }));
  if (hist.over > 0) buckets.push({ label: ">" + secs(hist.buckets[hist.buckets.length - 1].le), count: hist.over });
  let last = 0, first = buckets.length - 1;
  buckets.forEach((b, i) => { if (b.count > 0) { last = i; first = Math.min(first, i); } });
  const shown = buckets.slice(Math.max(0, Math.min(first, last - 5)), Math.max(last + 2, 6));
  const W = 420, H = 170, L = 8, T = 14, B = 34;
  const bw = (W - 2 * L) / shown.length, h = H - T - B;
  const max = Math.max(...shown.map((b) => b.count));
  el("line", { x1: L, y1: T + h, x2: W - L, y2: T + h, class: "axis" }, svg);
  shown.forEach((b, i) => {
    const bh = max ? (b.count / max) * h : 0;
    const x = L + i * bw;
    el("rect", { x: x + 2, y: T + h - bh, width: Math.max(bw - 4, 1), height: bh, class: "bar", "data-count": b.count }, svg);
    if (b.count > 0) el("text", { x: x + bw / 2, y: T + h - bh - 3, "text-anchor": "middle", class: "val" }, svg, int(b.count));
    el("text", { x: x + bw / 2, y: T + h + 13, "text-anchor": "middle", class: "tick" }, svg, b.label);
  });
  el("text", { x: W / 2, y: H - 4, "text-anchor": "middle", class: "tick" }, svg, "requests per latency bucket (since start)");
}

// drawTiers: a bar per tier, split by retention class in proportion to
// the tier's own blocks (the tiers differ in size by orders of magnitude;
// the count beside each bar gives the scale).
function drawTiers(svg, tiers) {
  clear(svg);
  const legend = document.getElementById("class-legend");
  legend.textContent = "";
  if (!tiers.length) { empty(svg, "no KV pool on this server"); return; }
  for (const c of tiers[0].classes) {
    const s = document.createElement("span");
    const i = document.createElement("i");
    i.className = "sw cls-" + c.class;
    s.append(i, c.class === "default" ? "unclassified" : c.class);
    legend.appendChild(s);
  }
  const W = 640, L = 120, R = 150, rowH = 34;
  tiers.forEach((t, r) => {
    const y = 6 + r * rowH;
    el("text", { x: L - 8, y: y + 16, "text-anchor": "end", class: "label" }, svg, t.label);
    el("rect", { x: L, y: y, width: W - L - R, height: 22, class: "track" }, svg);
    let x = L;
    for (const c of t.classes) {
      const w = t.blocks ? (c.blocks / t.blocks) * (W - L - R) : 0;
      if (w > 0) {
        const seg = el("rect", { x: x, y: y, width: w, height: 22, fill: CLASS_COLORS[c.class] || "#999" }, svg);
        el("title", {}, seg, c.class + ": " + int(c.blocks) + " blocks");
      }
      x += w;
    }
    if (!t.blocks) el("text", { x: L + 8, y: y + 15, class: "tick" }, svg, "empty");
    const note = int(t.blocks) + " blocks" + (t.bytes ? " · " + (t.bytes / 1048576).toFixed(1) + " MiB" : "");
    el("text", { x: W - R + 8, y: y + 16, class: "val", "data-metric": "tier-" + t.name, "data-value": t.blocks }, svg, note);
  });
}

// drawPool: G1's blocks in use by running requests, cached (pinned among
// them) and free.
function drawPool(svg, p) {
  clear(svg);
  if (!p) { metric("pool-used", null, ""); empty(svg, "no KV pool on this server"); return; }
  const used = p.total ? (p.active + p.cached) / p.total : 0;
  metric("pool-used", used, pct(used) + " of " + int(p.total) + " blocks hold KV");
  const W = 640, L = 20, R = 20, y = 8;
  const w = W - L - R;
  const parts = [
    { name: "active (running)", n: p.active, cls: "active" },
    { name: "pinned", n: p.pinned, cls: "pinned" },
    { name: "cached", n: p.cached - p.pinned, cls: "cached" },
    { name: "free", n: p.free, cls: "free" },
  ];
  let x = L;
  parts.forEach((part, i) => {
    const pw = p.total ? (part.n / p.total) * w : 0;
    if (pw > 0) el("rect", { x: x, y: y, width: pw, height: 36, class: "pool-" + part.cls }, svg);
    x += pw;
    const lx = L + i * (w / 4);
    el("rect", { x: lx, y: y + 50, width: 12, height: 12, class: "pool-" + part.cls }, svg);
    el("text", { x: lx + 18, y: y + 61, class: "label", "data-metric": "pool-" + part.cls, "data-value": part.n }, svg, part.name + ": " + int(part.n));
  });
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
}

function fillTable(id, rows, emptyText, cols) {
  const body = document.querySelector("#" + id + " tbody");
  body.textContent = "";
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = cols;
    td.className = "none";
    td.textContent = emptyText;
    tr.appendChild(td);
    body.appendChild(tr);
    return body;
  }
  return body;
}

function renderCaches(c) {
  if (!c) { metric("caches-live", null, ""); fillTable("caches", [], "no context caches on this server", 4); return; }
  metric("caches-live", c.live, int(c.live) + " live");
  const body = fillTable("caches", c.largest, c.error ? "could not be read: " + c.error : "none", 4);
  for (const r of c.largest) {
    const tr = document.createElement("tr");
    cell(tr, r.display_name ? r.display_name : r.name.replace("cachedContents/", ""));
    tr.firstChild.title = r.name;
    cell(tr, r.tenant || "(default)");
    cell(tr, int(r.tokens), "n");
    cell(tr, ago(r.expire_time));
    body.appendChild(tr);
  }
}

function renderSessions(s) {
  if (!s) { metric("sessions-count", null, ""); fillTable("sessions", [], "no engine on this server", 4); return; }
  metric("sessions-count", s.count, int(s.count) + " remembered");
  const body = fillTable("sessions", s.largest, "none", 4);
  for (const r of s.largest) {
    const tr = document.createElement("tr");
    cell(tr, r.id);
    cell(tr, r.tenant || "(default)");
    cell(tr, int(r.tokens), "n");
    cell(tr, ago(r.idle_at));
    body.appendChild(tr);
  }
}

function money(v, cur) {
  try { return new Intl.NumberFormat("en-US", { style: "currency", currency: cur || "USD", maximumFractionDigits: 4 }).format(v); } catch (_) { return v.toFixed(4) + " " + (cur || ""); }
}

function renderCosts(c) {
  const msg = document.getElementById("costs-message");
  msg.hidden = !c.message;
  metric("costs-message", c.message || "", c.message || "");
  document.getElementById("costs-since").textContent = c.enabled ? "since " + new Date(c.since).toLocaleString() : "";
  document.getElementById("costs").hidden = !c.enabled;
  if (!c.enabled) return;
  const body = fillTable("costs", c.tenants, "no usage yet", 5);
  for (const r of c.tenants) {
    const tr = document.createElement("tr");
    cell(tr, r.tenant || "(default)");
    cell(tr, int(r.requests), "n");
    cell(tr, pct(r.prompt_tokens ? r.cached_tokens / r.prompt_tokens : null), "n");
    cell(tr, money(r.cost, r.currency), "n");
    cell(tr, money(r.cost_without_cache - r.cost, r.currency), "n");
    body.appendChild(tr);
  }
}

function renderWorkers(ws) {
  show("workers-panel", ws != null);
  if (ws == null) return;
  const body = fillTable("workers", ws, "no live worker", 6);
  for (const w of ws) {
    const tr = document.createElement("tr");
    cell(tr, w.id);
    cell(tr, int(w.routed), "n");
    cell(tr, int(w.running), "n");
    cell(tr, int(w.waiting), "n");
    cell(tr, int(w.kv_blocks_active + w.kv_blocks_cached) + " / " + int(w.kv_blocks_total), "n");
    cell(tr, w.draining ? "draining" : "serving");
    body.appendChild(tr);
  }
}

// ---- start ----

document.addEventListener("DOMContentLoaded", () => {
  takeKeyFromFragment();
  document.getElementById("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY_ITEM, document.getElementById("key").value.trim());
    document.getElementById("key").value = "";
    poll();
  });
  const forget = () => {
    clearTimeout(timer);
    sessionStorage.removeItem(KEY_ITEM);
    poll();
  };
  document.getElementById("logout").addEventListener("click", forget);
  document.getElementById("refused-retry").addEventListener("click", forget);
  window.addEventListener("hashchange", () => { takeKeyFromFragment(); poll(); });
  poll();
});
