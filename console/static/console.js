// The Sluice web console: cluster members with their load and the busiest
// channels (polled from api/status), and a live tail of a channel over the
// WebSocket gateway with the TypeScript SDK (sluice.js, built from js/).
// Plain ES modules: the server serves these files as they are.
import { connect, ServerError, InvalidChannelError } from "./sluice.js";
import { initPresence } from "./presence.js";

const POLL_MS = 2000;
const MAX_ROWS = 500;
const MAX_PAYLOAD_CHARS = 400;
const TOKEN_KEY = "sluice.console.token";

const $ = (id) => document.getElementById(id);
const text = new TextDecoder("utf-8", { fatal: true });

const app = {
  config: null,
  token: sessionStorage.getItem(TOKEN_KEY) ?? "",
  client: null,
  sub: null,
  tailing: null, // identifies the current tail
  pollTimer: null,
  started: false,
  gen: 0, // incremented by every start and stop: late answers of an older one are ignored
};

// Exposed for scripted checks (the browser tests read it).
window.sluiceConsole = app;

function setBadge(state, title = "") {
  const b = $("conn");
  b.dataset.state = state;
  b.textContent = state === "connected" ? `live: ${app.client?.url ?? ""}` : state;
  b.title = title;
}

function authHeaders() {
  return app.token ? { Authorization: `Bearer ${app.token}` } : {};
}

async function main() {
  let cfg;
  try {
    const r = await fetch("config.json", { cache: "no-store" });
    if (!r.ok) throw new Error(`config.json: HTTP ${r.status}`);
    cfg = await r.json();
  } catch (e) {
    setBadge("closed", String(e));
    $("status-error").textContent = `Cannot load the console configuration: ${e.message}`;
    $("main").hidden = false;
    return;
  }
  app.config = cfg;
  $("node").textContent = cfg.node ?? "";
  document.title = `Sluice console: ${cfg.node ?? ""}`;
  if (cfg.auth && !app.token) return askToken("");
  start();
}

function askToken(message) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("token").focus();
}

$("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  app.token = $("token").value;
  sessionStorage.setItem(TOKEN_KEY, app.token);
  $("login").hidden = true;
  start();
});

/** A token the server refused: forget it and ask again. */
function refused(message) {
  stop();
  app.token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  askToken(message);
}

function start() {
  if (app.started) return;
  app.started = true;
  app.gen++;
  $("main").hidden = false;
  poll();
  if (!app.config.ws) {
    setBadge("off", "no WebSocket gateway");
    $("no-ws").hidden = false;
    $("tail-go").disabled = true;
    return;
  }
  openClient(0);
  if (!app.presenceUI) app.presenceUI = initPresence(app, () => app.client ?? clientReady);
  const ch = new URLSearchParams(location.search).get("channel");
  if (ch) {
    $("tail-channel").value = ch;
    const q = new URLSearchParams(location.search);
    const pos = q.get("position");
    if (pos) {
      $("tail-start").value = "position";
      $("tail-position").value = pos;
      $("tail-position").hidden = false;
    } else if (q.get("start")) $("tail-start").value = q.get("start");
    if (q.get("filter")) $("tail-filter").value = q.get("filter");
    tail();
  }
}

function stop() {
  app.started = false;
  app.gen++;
  clearTimeout(app.pollTimer);
  app.client?.close();
  app.client = null;
  app.sub = null;
}

/** The gateway URL, with a wildcard host replaced by the page's. */
function gatewayURL(ws) {
  const u = new URL(ws, location.href);
  if (u.hostname === "0.0.0.0" || u.hostname === "[::]" || u.hostname === "::" || u.hostname === "") {
    u.hostname = location.hostname;
  }
  return u.href;
}

let clientReady = null;

function openClient(attempt) {
  const gen = app.gen;
  const current = () => app.started && app.gen === gen;
  setBadge(attempt === 0 ? "starting" : "reconnecting");
  clientReady = connect(gatewayURL(app.config.ws), {
    token: app.token || undefined,
    name: "sluice-console",
    onState: (ev) => {
      if (!current()) return;
      if (ev.state === "connected") setBadge("connected");
      else if (ev.state === "disconnected") setBadge("reconnecting", ev.error.message);
      else if (ev.state === "closed") {
        setBadge("closed", ev.error.message);
        if (isAuthError(ev.error)) refused("The server no longer accepts this token.");
      }
    },
  }).then(
    (c) => {
      if (!current()) {
        c.close();
        return null;
      }
      app.client = c;
      setBadge("connected");
      return c;
    },
    (e) => {
      if (!current()) return null;
      if (isAuthError(e)) {
        refused("The server refused this token.");
        return null;
      }
      setBadge("reconnecting", e.message);
      // The SDK reconnects once connected; the first connection is retried here.
      const delay = Math.min(10000, 250 * 2 ** attempt) * (0.5 + Math.random() / 2);
      return new Promise((r) => setTimeout(r, delay)).then(() => (current() ? openClient(attempt + 1) : null));
    },
  );
  return clientReady;
}

function isAuthError(e) {
  for (let x = e; x; x = x.cause) if (x instanceof ServerError && x.codeName === "UNAUTHENTICATED") return true;
  return false;
}

// ---------------------------------------------------------------------------
// Members and channels

async function poll() {
  const gen = app.gen;
  if (!app.started) return;
  try {
    const r = await fetch("api/status", { headers: authHeaders(), cache: "no-store" });
    if (gen !== app.gen) return;
    if (r.status === 401 || r.status === 403) return refused("The server refused this token.");
    if (!r.ok) throw new Error(`HTTP ${r.status}`);
    render(await r.json());
    $("status-error").textContent = "";
    $("members-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    $("status-error").textContent = `Status unavailable: ${e.message}`;
  }
  if (app.started && gen === app.gen) app.pollTimer = setTimeout(poll, POLL_MS);
}

function cell(tr, value, cls) {
  const td = tr.insertCell();
  td.textContent = value;
  if (cls) td.className = cls;
  return td;
}

const rate = (n) => (n ?? 0).toLocaleString(undefined, { maximumFractionDigits: 1 });

function bytes(n) {
  n = n ?? 0;
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toLocaleString(undefined, { maximumFractionDigits: 1 })} ${units[i]}`;
}

function render(st) {
  const mb = $("members").tBodies[0];
  mb.replaceChildren();
  for (const m of st.members ?? []) {
    const tr = mb.insertRow();
    tr.dataset.member = m.name;
    cell(tr, m.name);
    cell(tr, m.addr ?? "");
    cell(tr, m.state ?? "");
    const l = m.load ?? {};
    cell(tr, l.streamlets ?? 0, "num");
    cell(tr, l.channels ?? 0, "num");
    cell(tr, l.connections ?? 0, "num");
    cell(tr, rate(l.msgsInPerSec), "num");
    cell(tr, `${bytes(l.bytesInPerSec)}/s`, "num");
  }
  if (mb.rows.length === 0) empty(mb, 8, "no members reported");

  const cb = $("channels").tBodies[0];
  cb.replaceChildren();
  const chans = [...(st.channels ?? [])].sort((a, b) => (b.msgsPerSec ?? 0) - (a.msgsPerSec ?? 0)).slice(0, 20);
  for (const c of chans) {
    const tr = cb.insertRow();
    tr.dataset.channel = c.name;
    const b = document.createElement("button");
    b.className = "link";
    b.textContent = c.name;
    b.title = "tail this channel";
    b.onclick = () => {
      $("tail-channel").value = c.name;
      tail();
    };
    tr.insertCell().append(b);
    cell(tr, rate(c.msgsPerSec), "num");
    cell(tr, `${bytes(c.bytesPerSec)}/s`, "num");
    cell(tr, c.subscribers ?? 0, "num");
  }
  if (cb.rows.length === 0) empty(cb, 4, "no channel traffic");
}

function empty(tbody, cols, msg) {
  const tr = tbody.insertRow();
  tr.className = "empty";
  const td = tr.insertCell();
  td.colSpan = cols;
  td.textContent = msg;
}

// ---------------------------------------------------------------------------
// Live tail

$("tail-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  tail();
});
$("tail-stop").addEventListener("click", () => untail("stopped"));

$("tail-start").addEventListener("change", () => {
  $("tail-position").hidden = $("tail-start").value !== "position";
});

function startOption(v) {
  if (v === "earliest") return "earliest";
  if (v === "position") {
    const t = $("tail-position").value.trim();
    if (!/^[1-9][0-9]*$/.test(t) || !Number.isSafeInteger(Number(t))) throw new Error("a position is a whole number from 1");
    return { position: Number(t) };
  }
  if (v === "last100") return { last: 100 };
  return "live";
}

async function untail(why) {
  const sub = app.sub;
  app.sub = null;
  app.tailing = null;
  $("tail-stop").disabled = true;
  if (why) $("tail-status").textContent = why;
  await sub?.unsubscribe().catch(() => {});
}

async function tail() {
  const channel = $("tail-channel").value.trim();
  if (!channel) return;
  await untail("");
  $("tail").tBodies[0].replaceChildren();
  $("tail-status").textContent = `subscribing to ${channel}…`;
  const c = app.client ?? (await clientReady);
  if (!c) return;
  // Events of this tail (the first ones arrive before subscribe resolves)
  // are shown while it is the current one.
  const mine = {};
  app.tailing = mine;
  try {
    const start = startOption($("tail-start").value);
    const filter = $("tail-filter").value.trim() || undefined;
    const sub = await c.subscribe(channel, {
      start,
      filter,
      onEvent: (ev) => {
        if (app.tailing === mine) addRow(ev);
      },
      onEnd: (err) => {
        if (app.tailing === mine && err.name !== "UnsubscribedError") {
          $("tail-status").textContent = `ended: ${err.message}`;
          $("tail-stop").disabled = true;
        }
      },
    });
    app.sub = sub;
    $("tail-stop").disabled = false;
    const i = sub.info;
    const retained = i.earliest !== 0 && i.earliest < i.next ? `retained ${i.earliest}–${i.next - 1}` : "nothing retained";
    const only = filter ? `, only where ${filter}` : "";
    $("tail-status").textContent = `tailing ${channel} from position ${i.first}${only} (${retained}, epoch ${i.epoch})`;
    if ($("tail").tBodies[0].rows.length === 0) {
      const tr = $("tail").tBodies[0].insertRow();
      tr.className = "empty waiting";
      const td = tr.insertCell();
      td.colSpan = 3;
      td.textContent = "waiting for messages…";
    }
  } catch (e) {
    const why =
      e instanceof InvalidChannelError
        ? e.message
        : e instanceof ServerError
          ? `refused: ${e.codeName}${e.codeName === "INVALID_FILTER" ? ": " + e.text : ""}`
          : e.message;
    $("tail-status").textContent = why;
  }
}

function showPayload(p) {
  let s;
  try {
    s = text.decode(p);
  } catch {
    s = "0x" + Array.from(p.subarray(0, MAX_PAYLOAD_CHARS / 2), (x) => x.toString(16).padStart(2, "0")).join("");
    if (p.length > MAX_PAYLOAD_CHARS / 2) s += "…";
    return `${s} (${p.length} bytes, binary)`;
  }
  return s.length > MAX_PAYLOAD_CHARS ? `${s.slice(0, MAX_PAYLOAD_CHARS)}… (${p.length} bytes)` : s;
}

function addRow(ev) {
  const tb = $("tail").tBodies[0];
  tb.querySelector("tr.waiting")?.remove();
  const tr = tb.insertRow(0); // newest first
  const now = new Date().toLocaleTimeString();
  if (ev.kind === "message") {
    tr.className = "message";
    tr.dataset.position = String(ev.position);
    cell(tr, String(ev.position), "num");
    cell(tr, now);
    const td = cell(tr, showPayload(ev.payload), "payload");
    const meta = [];
    if (ev.msgId) meta.push(`id ${showPayload(ev.msgId)}`);
    for (const h of ev.headers ?? []) meta.push(`${h.key}: ${h.value}`);
    if (meta.length > 0) {
      const m = document.createElement("div");
      m.className = "meta";
      m.textContent = meta.join(" · ");
      td.prepend(m);
    }
  } else if (ev.kind === "gap") {
    tr.className = "gap";
    tr.dataset.gap = `${ev.from}-${ev.to}`;
    cell(tr, ev.from === ev.to ? `${ev.from}` : `${ev.from}–${ev.to}`, "num");
    cell(tr, now);
    const n = ev.to - ev.from + 1;
    cell(tr, `gap: ${n} message${n === 1 ? "" : "s"} not delivered (${ev.reason})`);
  } else {
    tr.className = "epoch";
    tr.dataset.epoch = String(ev.epoch);
    cell(tr, String(ev.position), "num");
    cell(tr, now);
    cell(tr, `new incarnation of the channel (epoch ${ev.epoch}): its positions start again at ${ev.position}`);
  }
  while (tb.rows.length > MAX_ROWS) tb.deleteRow(tb.rows.length - 1);
}

main();
