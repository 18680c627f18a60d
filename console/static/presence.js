// The console's presence panel (docs/presence.md): a channel's occupancy
// and members, kept live by a subscription with presence events and
// occupancy (the SDK keeps the member set); while the channel has more
// members than the server sends events for, the member list is queried
// again every few seconds instead.
import { ServerError, InvalidChannelError } from "./sluice.js";

const REQUERY_MS = 3000;
const MAX_MEMBERS_SHOWN = 1000;
const MAX_INFO_CHARS = 200;

const $ = (id) => document.getElementById(id);
const text = new TextDecoder("utf-8", { fatal: true });

/**
 * Wires the panel to the console. client() returns the console's SDK
 * client, waiting for it (null when it is closed); the panel starts with
 * the page's ?presence=CHANNEL.
 */
export function initPresence(app, client) {
  const p = {
    channel: null,
    sub: null,
    occ: null,
    paused: false,
    timer: null,
    gen: 0,
    log: [], // recent joins and leaves, newest first
  };
  app.presence = p; // exposed for scripted checks

  $("presence-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    watch($("presence-channel").value.trim());
  });
  $("presence-stop").addEventListener("click", () => unwatch("stopped"));

  async function unwatch(why) {
    p.gen++;
    clearTimeout(p.timer);
    const sub = p.sub;
    p.sub = null;
    p.channel = null;
    $("presence-stop").disabled = true;
    if (why) $("presence-status").textContent = why;
    await sub?.unsubscribe().catch(() => {});
  }

  async function watch(channel) {
    if (!channel) return;
    await unwatch("");
    const gen = p.gen;
    p.channel = channel;
    p.occ = null;
    p.paused = false;
    p.log = [];
    renderMembers([], true);
    $("presence-status").textContent = `watching ${channel}…`;
    const c = await client();
    if (!c || gen !== p.gen) return;
    try {
      const sub = await c.subscribe(channel, {
        presenceEvents: true,
        occupancy: true,
        onEvent: (ev) => {
          if (gen === p.gen) onEvent(ev);
        },
        onEnd: (err) => {
          if (gen === p.gen && err.name !== "UnsubscribedError") $("presence-status").textContent = `ended: ${err.message}`;
        },
      });
      if (gen !== p.gen) return void sub.unsubscribe().catch(() => {});
      p.sub = sub;
      $("presence-stop").disabled = false;
      $("presence-status").textContent = `watching ${channel}`;
      refresh(gen);
    } catch (e) {
      const why = e instanceof InvalidChannelError ? e.message : e instanceof ServerError ? `refused: ${e.codeName}` : e.message;
      $("presence-status").textContent = why;
    }
  }

  function onEvent(ev) {
    if (ev.kind === "occupancy") {
      p.occ = ev.occupancy;
      const was = p.paused;
      p.paused = ev.eventsPaused;
      renderCounts();
      if (p.paused && !was) refresh(p.gen);
      return;
    }
    if (ev.kind === "join" || ev.kind === "leave") {
      p.log.unshift({ kind: ev.kind, member: ev.member, at: new Date() });
      p.log.length = Math.min(p.log.length, 20);
      renderLog();
      renderFromSet();
    }
  }

  /** Shows the SDK's member set, or queries the server while paused or not yet synced. */
  function renderFromSet() {
    const m = p.sub?.members();
    if (m?.complete) renderMembers(m.members, false);
  }

  async function refresh(gen) {
    clearTimeout(p.timer);
    const c = await client();
    if (!c || gen !== p.gen || !p.channel) return;
    try {
      const m = p.sub?.members();
      if (m?.complete) {
        renderMembers(m.members, false);
      } else {
        const st = await c.presence(p.channel);
        if (gen !== p.gen) return;
        p.occ = st.occupancy;
        renderCounts();
        renderMembers(st.members, st.partial);
      }
    } catch (e) {
      if (gen === p.gen) $("presence-status").textContent = e instanceof ServerError ? `refused: ${e.codeName}` : e.message;
    }
    if (gen === p.gen) p.timer = setTimeout(() => refresh(gen), REQUERY_MS);
  }

  function renderCounts() {
    const o = p.occ;
    $("presence-subscribers").textContent = o ? String(o.subscribers) : "–";
    $("presence-publishers").textContent = o ? String(o.publishers) : "–";
    $("presence-members").textContent = o ? String(o.members) : "–";
    $("presence-paused").hidden = !p.paused;
  }

  function renderMembers(members, partial) {
    const tb = $("presence-list").tBodies[0];
    tb.replaceChildren();
    for (const m of members.slice(0, MAX_MEMBERS_SHOWN)) {
      const tr = tb.insertRow();
      tr.dataset.member = `${m.node}/${m.conn}`;
      tr.insertCell().textContent = m.clientId || "(none)";
      tr.insertCell().textContent = m.node;
      const conn = tr.insertCell();
      conn.textContent = String(m.conn);
      conn.className = "num";
      const info = tr.insertCell();
      info.textContent = showInfo(m.info);
      info.className = "payload";
    }
    if (tb.rows.length === 0) {
      const tr = tb.insertRow();
      tr.className = "empty";
      const td = tr.insertCell();
      td.colSpan = 4;
      td.textContent = p.channel ? "no members" : "choose a channel";
    }
    $("presence-partial").hidden = !partial && members.length <= MAX_MEMBERS_SHOWN;
  }

  function renderLog() {
    const ul = $("presence-log");
    ul.replaceChildren();
    for (const e of p.log) {
      const li = document.createElement("li");
      li.className = e.kind;
      li.textContent = `${e.at.toLocaleTimeString()} ${e.kind === "join" ? "joined" : "left"}: ${e.member.clientId || "(none)"} on ${e.member.node} (connection ${e.member.conn})`;
      ul.append(li);
    }
  }

  const ch = new URLSearchParams(location.search).get("presence");
  if (ch) {
    $("presence-channel").value = ch;
    watch(ch);
  }
  return { watch, unwatch };
}

function showInfo(b) {
  if (!b || b.length === 0) return "";
  let s;
  try {
    s = text.decode(b);
  } catch {
    return `(${b.length} bytes, binary)`;
  }
  return s.length > MAX_INFO_CHARS ? `${s.slice(0, MAX_INFO_CHARS)}…` : s;
}
