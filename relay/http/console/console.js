// The relay console: polls the node's HTTP API every two seconds and tails one stream.
// No build step and nothing from the internet: this file, console.css and index.html.
"use strict";

const REFRESH_MS = 2000;
const TAIL_ROWS = 100;
const TAIL_START = 20;
const state = {
  token: "", selected: "", lastTxs: new Map(), lastAt: 0, tail: null, chaosUrl: "",
  self: 0, nodes: new Map(), replicas: new Map(),
};

function $(id) { return document.getElementById(id); }

// Where to ask about a stream: this node if it replicates it, else a serving replica's origin
// (a redirect to another origin would drop the token, so the page goes there itself).
function streamBase(stream) {
  const replicas = state.replicas.get(stream) || [];
  if (!replicas.length || replicas.includes(state.self)) return "";
  const serving = replicas.map((n) => state.nodes.get(n)).filter((n) => n && n.http && n.state === "serving");
  return serving.length ? serving[0].http : "";
}

function headers() {
  return state.token ? { Authorization: "Bearer " + state.token } : {};
}

async function api(path) {
  const response = await fetch(path, { headers: headers() });
  if (response.status === 401) {
    $("token-form").hidden = false;
    throw new Error("this cluster needs a bearer token");
  }
  if (!response.ok) {
    let message = response.statusText;
    try { message = (await response.json()).error.message; } catch (_) { /* not JSON */ }
    throw new Error(message);
  }
  return response.json();
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "-" : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function fill(tableId, rows, draw) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren(...rows.map((item) => {
    const row = document.createElement("tr");
    draw(row, item);
    return row;
  }));
}

function bytes(n) {
  if (n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

async function refreshNodes() {
  const cluster = await api("/cluster");
  $("cluster-name").textContent = cluster.cluster;
  $("served-by").textContent = "served by node " + cluster.node;
  state.self = cluster.node;
  state.nodes = new Map(cluster.nodes.map((n) => [n.node, n]));
  fill("nodes", cluster.nodes, (row, n) => {
    cell(row, n.node);
    cell(row, n.state, "state-" + n.state);
    cell(row, n.epoch);
    cell(row, (n.peers_up || []).join(", "));
    cell(row, (n.peers_down || []).join(", "));
    cell(row, n.storage);
    cell(row, bytes(n.log_bytes));
    cell(row, n.streams);
    cell(row, n.unverified_txs);
    cell(row, n.http);
  });
}

async function refreshStreams() {
  const all = $("show-all").checked ? "?all=true" : "";
  const { streams } = await api("/streams" + all);
  const now = performance.now();
  const seconds = state.lastAt ? (now - state.lastAt) / 1000 : 0;
  fill("streams", streams, (row, s) => {
    row.className = "clickable" + (s.stream === state.selected ? " selected" : "");
    row.dataset.stream = s.stream;
    row.addEventListener("click", () => select(s.stream));
    const before = state.lastTxs.get(s.stream);
    const rate = seconds && before !== undefined ? Math.max(0, (s.txs - before) / seconds) : 0;
    cell(row, s.stream);
    cell(row, s.replicas.join(", "));
    cell(row, s.txs);
    cell(row, bytes(s.bytes));
    cell(row, rate.toFixed(1));
    cell(row, s.last_time);
    cell(row, Object.entries(s.heads).map(([n, seq]) => n + ": " + seq).join("  "));
  });
  state.lastTxs = new Map(streams.map((s) => [s.stream, s.txs]));
  state.replicas = new Map(streams.map((s) => [s.stream, s.replicas]));
  state.lastAt = now;
}

async function refreshDetail() {
  if (!state.selected) return;
  const at = streamBase(state.selected) + "/streams/" + encodeURIComponent(state.selected);
  const [info, groups, queues] = await Promise.all([
    api(at), api(at + "/groups"), api(at + "/queues"),
  ]);
  const settings = Object.entries(info.settings).filter(([key]) => key !== "stream");
  fill("settings", settings, (row, [key, value]) => {
    cell(row, key);
    cell(row, Array.isArray(value) ? value.join(", ") : value === "" ? "-" : value);
  });
  fill("groups", groups.groups, (row, g) => {
    cell(row, g.group);
    cell(row, g.committed ? g.committed.seq : "none");
    cell(row, g.lag);
  });
  fill("queues", queues.queues, (row, q) => {
    cell(row, q.group);
    cell(row, q.ready);
    cell(row, q.delayed);
    cell(row, q.claimed);
    cell(row, q.acked);
    cell(row, q.dead);
  });
}

async function refreshChaos() {
  const response = await fetch("/chaos/report.png", { headers: headers() });
  if (!response.ok) { $("chaos-section").hidden = true; return; }
  if (state.chaosUrl) URL.revokeObjectURL(state.chaosUrl);
  state.chaosUrl = URL.createObjectURL(await response.blob());
  $("chaos").src = state.chaosUrl;
  $("chaos-section").hidden = false;
}

function addTailRow(tx) {
  const body = $("tail").tBodies[0];
  const row = document.createElement("tr");
  cell(row, tx.seq);
  cell(row, tx.index);
  cell(row, new Date(tx.timestamp_ms).toISOString());
  cell(row, tx.key !== undefined ? tx.key : tx.key_b64);
  cell(row, tx.payload !== undefined ? tx.payload : "(base64) " + tx.payload_b64, "payload");
  body.insertBefore(row, body.firstChild);
  while (body.rows.length > TAIL_ROWS) body.deleteRow(body.rows.length - 1);
}

async function tail(stream, controller) {
  // Follows the stream as JSON lines from its last 20 transactions; after a cut it resumes
  // after the last seq it showed.
  let after = "";
  while (!controller.signal.aborted) {
    const query = after ? "after=" + after : "from_index=-" + TAIL_START;
    try {
      const response = await fetch(
        streamBase(stream) + "/streams/" + encodeURIComponent(stream) + "/messages?" + query,
        { headers: headers(), signal: controller.signal },
      );
      if (!response.ok) throw new Error(response.statusText);
      $("tail-state").textContent = "following";
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let pending = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        pending += value;
        const lines = pending.split("\n");
        pending = lines.pop();
        for (const line of lines) {
          if (!line) continue;
          const tx = JSON.parse(line);
          if (tx.error) throw new Error(tx.error.message);
          after = tx.seq;
          addTailRow(tx);
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
      $("tail-state").textContent = "reconnecting: " + error.message;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

function select(stream) {
  if (state.tail) state.tail.abort();
  state.selected = stream;
  $("detail-name").textContent = stream;
  $("detail-section").hidden = false;
  $("tail").tBodies[0].replaceChildren();
  for (const row of $("streams").tBodies[0].rows) {
    row.classList.toggle("selected", row.dataset.stream === stream);
  }
  state.tail = new AbortController();
  tail(stream, state.tail);
  refreshDetail().catch(() => {});
}

async function refresh() {
  try {
    await Promise.all([refreshNodes(), refreshStreams(), refreshDetail()]);
    $("status").textContent = "updated " + new Date().toLocaleTimeString();
    $("status").className = "";
  } catch (error) {
    $("status").textContent = error.message;
    $("status").className = "error";
  }
}

function start() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) {
    sessionStorage.setItem("relay-token", fromHash);
    history.replaceState(null, "", location.pathname + location.search);
  }
  state.token = sessionStorage.getItem("relay-token") || "";
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("relay-token", state.token);
    $("token-form").hidden = true;
    refresh();
    refreshChaos().catch(() => {});
  });
  const stream = new URLSearchParams(location.search).get("stream");
  refresh().then(() => { if (stream) select(stream); });
  refreshChaos().catch(() => {});
  setInterval(refresh, REFRESH_MS);
  setInterval(() => refreshChaos().catch(() => {}), 30 * REFRESH_MS);
}

start();
