// Browser tests: the web console and the SDK in headless Chromium against a
// real `sluice serve` (WebSocket gateway + HTTP listener on free ports).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { startServer, goPublish, waitEarliest, cuttableProxy, holdOff } from "./server.mjs";
import { launchBrowser } from "./browser.mjs";
import { connect } from "../dist/index.js";

const WAIT = { timeout: 20000 };

// Channels under console.old. keep 5 messages per streamlet for 100 ms
// after it closes, so a test can make their first positions expire.
const shortHistory = `
[[channel-rules]]
prefix = "console.old."
limit-msgs = 5
limit-life = "1m"
ttl = "100ms"
`;

test("console: members, channels and a typed channel's live tail with positions; screenshot", async () => {
  const srv = await startServer({ config: shortHistory });
  const b = await launchBrowser();
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/`);
    await page.waitForSelector('#conn[data-state="connected"]', WAIT);
    await page.waitForSelector("#members tbody tr[data-member]", WAIT);

    // The user types a channel and starts tailing it from now.
    await page.fill("#tail-channel", "console.demo");
    await page.click("#tail-go");
    await page.waitForFunction(() => document.querySelector("#tail-status").textContent.startsWith("tailing console.demo"), null, WAIT);

    const messages = ["hello from Go", "второе сообщение", '{"price": 42.5}'];
    const positions = await goPublish(srv, "console.demo", messages);
    assert.deepEqual(positions, [1, 2, 3], "a new channel numbers from 1");
    await page.waitForFunction((n) => document.querySelectorAll("#tail tbody tr.message").length === n, messages.length, WAIT);
    const rows = await page.$$eval("#tail tbody tr.message", (trs) =>
      trs.map((tr) => ({ pos: tr.dataset.position, cells: [...tr.cells].map((td) => td.textContent) })),
    );
    // Newest first.
    const want = positions.map((p, i) => ({ pos: String(p), payload: messages[i] })).reverse();
    assert.deepEqual(
      rows.map((r) => ({ pos: r.pos, payload: r.cells[2] })),
      want,
    );
    for (const r of rows) assert.equal(r.cells[0], r.pos, "the position is shown");

    // The busiest channels (polled from the status API) list the tailed
    // channel, and a channel under load with its message rate.
    await page.waitForSelector('#channels tbody tr[data-channel="console.demo"]', WAIT);
    const load = await connect(srv.wsURL);
    let loading = true;
    const loader = (async () => {
      for (let i = 0; loading && i < 400; i++) {
        await Promise.all(Array.from({ length: 10 }, (_, j) => load.publish("console.load", `tick ${i}.${j}`)));
        await new Promise((r) => setTimeout(r, 50)); // a steady rate, not a flood
      }
    })();
    try {
      await page.waitForFunction(() => {
        const tr = document.querySelector('#channels tbody tr[data-channel="console.load"]');
        return tr && parseFloat(tr.cells[1].textContent.replace(/,/g, "")) > 0;
      }, null, WAIT);
    } finally {
      loading = false;
      await loader;
      load.close();
    }

    // Tailing from position 1 of a channel whose positions 1..5 expired
    // shows a gap notice for them, then the messages from 6.
    const old = "console.old.demo";
    await goPublish(srv, old, ["o1", "o2", "o3", "o4", "o5"]);
    const kept = await goPublish(srv, old, messages); // a second streamlet, open for a minute
    assert.deepEqual(kept, [6, 7, 8]);
    const look = await connect(srv.wsURL);
    const info = await waitEarliest(look, old, 6);
    look.close();
    await page.fill("#tail-channel", old);
    await page.selectOption("#tail-start", "position");
    await page.fill("#tail-position", "1");
    await page.click("#tail-go");
    // The table still shows console.demo's three rows until the new tail
    // starts: wait for the new channel's rows themselves, gap included.
    const wantPositions = kept.map(String).reverse().join(",");
    await page.waitForFunction(
      (want) => {
        const rows = [...document.querySelectorAll("#tail tbody tr")];
        const msgs = rows.filter((tr) => tr.classList.contains("message")).map((tr) => tr.dataset.position);
        return msgs.join(",") === want && rows.some((tr) => tr.classList.contains("gap"));
      },
      wantPositions,
      WAIT,
    );
    const tailRows = await page.$$eval("#tail tbody tr", (trs) => trs.map((tr) => [tr.className, tr.cells[0].textContent, tr.cells[2].textContent]));
    assert.deepEqual(tailRows, [
      ...kept.map((p, i) => ["message", String(p), messages[i]]).reverse(),
      ["gap", "1–5", "gap: 5 messages not delivered (expired)"],
    ]);
    assert.equal(await page.textContent("#tail-status"), `tailing ${old} from position 6 (retained 6–8, epoch ${info.epoch})`);

    const dir = mkdtempSync(path.join(tmpdir(), "sluice-console-"));
    const shot = path.join(dir, "console.png");
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`console screenshot: ${shot}`);
    assert.deepEqual(b.errors.map(String), []);
    assert.deepEqual(b.consoleErrors, []);
  } finally {
    await b.close();
    await srv.stop();
  }
});

test("console: asks for a token when the server requires one, and refuses a wrong one", async () => {
  const token = "console-token-" + Math.random().toString(36).slice(2);
  const hash = createHash("sha256").update(token).digest("hex");
  const config = `
[auth]
anonymous = ""
[[auth.roles]]
name = "ops"
publish = [">"]
subscribe = [">"]
[[auth.tokens]]
name = "ops"
hash = "sha256:${hash}"
role = "ops"
`;
  const srv = await startServer({ config });
  const b = await launchBrowser();
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/`);
    await page.waitForSelector("#login:not([hidden])", WAIT);
    assert.equal(await page.isHidden("#main"), true);

    await page.fill("#token", "not-the-token");
    await page.click('#login-form button[type="submit"]');
    await page.waitForFunction(() => document.querySelector("#login-error").textContent !== "", null, WAIT);
    await page.waitForSelector("#login:not([hidden])", WAIT);

    await page.fill("#token", token);
    await page.click('#login-form button[type="submit"]');
    await page.waitForSelector('#conn[data-state="connected"]', WAIT);
    await page.waitForSelector("#members tbody tr[data-member]", WAIT);
    await page.fill("#tail-channel", "secure.ch");
    await page.click("#tail-go");
    await page.waitForFunction(() => document.querySelector("#tail-status").textContent.startsWith("tailing secure.ch"), null, WAIT);
    const [p] = await goPublish(srv, "secure.ch", ["authorised"], token);
    await page.waitForSelector(`#tail tbody tr.message[data-position="${p}"]`, WAIT);
  } finally {
    await b.close();
    await srv.stop();
  }
});

// The page's own JavaScript uses the SDK: it publishes and subscribes; the
// test then kills the server and starts it again on the same ports, and the
// page's subscription resumes by itself and reports the epoch change (the
// restarted server's history is new), then receives what is published next.
test("SDK in the page: publish and subscribe, then the server is killed and restarted: the subscription resumes and reports the epoch change", async () => {
  let srv = await startServer();
  const b = await launchBrowser();
  try {
    const { page } = b;
    // A document of the server's origin (a real loopback response, so that
    // Chromium's local network access checks let it open the gateway), from
    // which the page's script imports the SDK bundle.
    await page.goto(`${srv.httpURL}/console/config.json`);
    const first = await page.evaluate(async (wsURL) => {
      const sluice = await import("/console/sluice.js");
      const w = window;
      w.events = [];
      w.states = [];
      w.client = await sluice.connect(wsURL, {
        backoffMinMs: 50,
        backoffMaxMs: 500,
        onState: (e) => w.states.push(e.state),
      });
      const td = new TextDecoder();
      w.sub = await w.client.subscribe("browser.sdk", {
        start: "earliest",
        onEvent: (ev) =>
          w.events.push(
            ev.kind === "message"
              ? { kind: "message", position: String(ev.position), text: td.decode(ev.payload) }
              : ev.kind === "gap"
                ? { kind: "gap", from: String(ev.from), to: String(ev.to), reason: ev.reason }
                : { kind: "epoch", epoch: String(ev.epoch), position: String(ev.position) },
          ),
      });
      w.epoch0 = String(w.sub.info.epoch);
      const ps = await Promise.all(["one", "two", "three"].map((m) => w.client.publish("browser.sdk", m)));
      return ps.map(String);
    }, srv.wsURL);
    assert.equal(first.length, 3);
    await page.waitForFunction(() => window.events.length === 3, null, WAIT);
    assert.deepEqual(
      await page.evaluate(() => window.events),
      first.map((p, i) => ({ kind: "message", position: p, text: ["one", "two", "three"][i] })),
    );

    const ports = srv.ports;
    await srv.kill();
    await page.waitForFunction(() => window.states.includes("disconnected"), null, WAIT);
    // A publish while the server is down waits for the next connection.
    const pending = page.evaluate(() => window.client.publish("browser.sdk", "after restart").then(String));
    srv = await startServer(ports);
    const afterPos = await pending;
    await page.waitForFunction(() => window.events.some((e) => e.kind === "epoch"), null, WAIT);
    await page.waitForFunction(() => window.events.some((e) => e.text === "after restart"), null, WAIT);
    const evs = await page.evaluate(() => window.events);
    const epochIdx = evs.findIndex((e) => e.kind === "epoch");
    assert.equal(epochIdx, 3, "the epoch change comes right after the three messages");
    assert.notEqual(evs[epochIdx].epoch, await page.evaluate(() => window.epoch0));
    // The restarted node's channel is a new incarnation, numbered from 1 and delivered whole.
    assert.deepEqual(first, ["1", "2", "3"]);
    assert.equal(evs[epochIdx].position, "1");
    assert.equal(afterPos, "1");
    assert.deepEqual(evs.slice(epochIdx + 1), [{ kind: "message", position: "1", text: "after restart" }]);
    assert.deepEqual(await page.evaluate(() => [typeof window.sub.info.epoch, typeof window.sub.nextPosition]), ["number", "number"]);
    assert.deepEqual(await page.evaluate(() => window.states.slice(0, 3)), ["connected", "disconnected", "connected"]);
    assert.deepEqual(b.errors.map(String), []);
  } finally {
    await b.close();
    await srv.stop();
  }
});

test("SDK in the page: the connection is cut while messages are published; the page resumes at the last delivered + 1 and gets each once", async () => {
  const srv = await startServer();
  const proxy = await cuttableProxy(srv.ports.ws);
  const b = await launchBrowser();
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/config.json`);
    await page.evaluate(async (wsURL) => {
      const sluice = await import("/console/sluice.js");
      const w = window;
      w.events = [];
      w.states = [];
      w.client = await sluice.connect(wsURL, { backoffMinMs: 50, backoffMaxMs: 300, onState: (e) => w.states.push(e.state) });
      const td = new TextDecoder();
      w.sub = await w.client.subscribe("browser.cut", {
        onEvent: (ev) => w.events.push(ev.kind === "message" ? { position: String(ev.position), text: td.decode(ev.payload) } : { kind: ev.kind }),
      });
    }, `ws://127.0.0.1:${proxy.port}/`);
    const before = await goPublish(srv, "browser.cut", ["b1", "b2"]);
    await page.waitForFunction(() => window.events.length === 2, null, WAIT);
    // Hold reconnects off while publishing: the proxy takes no new connections, and the open one is reset.
    await holdOff(proxy);
    await page.waitForFunction(() => window.states.includes("disconnected"), null, WAIT);
    const during = await goPublish(srv, "browser.cut", ["d1", "d2", "d3"]);
    // Let the page back in on the same port.
    const proxy2 = await cuttableProxy(srv.ports.ws, proxy.port);
    try {
      await page.waitForFunction((n) => window.events.length === n, 5, WAIT);
      const after = await goPublish(srv, "browser.cut", ["a1"]);
      await page.waitForFunction((n) => window.events.length === n, 6, WAIT);
      const evs = await page.evaluate(() => window.events);
      const all = [...before, ...during, ...after];
      assert.deepEqual(
        evs,
        all.map((p, i) => ({ position: String(p), text: ["b1", "b2", "d1", "d2", "d3", "a1"][i] })),
        "every message once, in order, no gap, no epoch change",
      );
      assert.deepEqual(await page.evaluate(() => window.states), ["connected", "disconnected", "connected"]);
    } finally {
      proxy2.cut();
      await proxy2.close();
    }
    assert.deepEqual(b.errors.map(String), []);
  } finally {
    await b.close();
    await srv.stop();
  }
});

// A page's subscription away while its node restarts and the new
// incarnation's first messages expire: the resume reports the epoch
// change, exactly the new incarnation's positions 1..3 as lost, then its
// messages from 4; every position and epoch is a number.
test("SDK in the page: a resume across a node's restart, the new incarnation's first positions expired: the epoch change, gap 1-3 lost, then position 4", async () => {
  const args = ["--limit-msgs", "3", "--limit-life", "1m", "--ttl", "100ms"];
  let srv = await startServer({ args });
  const proxy = await cuttableProxy(srv.ports.ws);
  const b = await launchBrowser();
  let proxy2 = null;
  let watch = null;
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/config.json`);
    await page.evaluate(async (wsURL) => {
      const sluice = await import("/console/sluice.js");
      const w = window;
      w.events = [];
      w.client = await sluice.connect(wsURL, { backoffMinMs: 20, backoffMaxMs: 100 });
      const td = new TextDecoder();
      w.sub = await w.client.subscribe("browser.incarnation", {
        start: "earliest",
        onEvent: (ev) => w.events.push(ev.kind === "message" ? { kind: "message", position: ev.position, text: td.decode(ev.payload) } : ev),
      });
    }, `ws://127.0.0.1:${proxy.port}/`);
    assert.deepEqual(await goPublish(srv, "browser.incarnation", ["m1", "m2"]), [1, 2]);
    await page.waitForFunction(() => window.events.length === 2, null, WAIT);
    const oldEpoch = await page.evaluate(() => window.sub.info.epoch);
    await holdOff(proxy);
    await srv.kill();
    srv = await startServer({ args });
    watch = await connect(srv.wsURL);
    await watch.subscribe("browser.incarnation"); // a reader: the channel is not dropped while the page is away
    assert.deepEqual(await goPublish(srv, "browser.incarnation", ["n1", "n2", "n3", "n4"]), [1, 2, 3, 4]);
    const info = await waitEarliest(watch, "browser.incarnation", 4);
    proxy2 = await cuttableProxy(srv.ports.ws, proxy.port);
    await page.waitForFunction(() => window.events.length === 5, null, WAIT);
    assert.deepEqual(await page.evaluate(() => window.events), [
      { kind: "message", position: 1, text: "m1" },
      { kind: "message", position: 2, text: "m2" },
      { kind: "epoch", channel: "browser.incarnation", epoch: info.epoch, position: 1 },
      { kind: "gap", channel: "browser.incarnation", from: 1, to: 3, reason: "lost" },
      { kind: "message", position: 4, text: "n4" },
    ]);
    assert.notEqual(info.epoch, oldEpoch);
    assert.deepEqual(await page.evaluate(() => [window.sub.info, window.sub.nextPosition]), [{ first: 4, earliest: 4, next: 5, epoch: info.epoch }, 5]);
    assert.deepEqual(b.errors.map(String), []);
  } finally {
    watch?.close();
    await b.close();
    proxy2?.cut();
    await proxy2?.close();
    await srv.kill();
  }
});

test("console: a channel tailed across a server restart shows the new incarnation's epoch row, then its messages from 1", async () => {
  let srv = await startServer();
  const b = await launchBrowser();
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/?channel=console.restart&start=earliest`);
    await page.waitForFunction(() => document.querySelector("#tail-status").textContent.startsWith("tailing console.restart"), null, WAIT);
    await goPublish(srv, "console.restart", ["before"]);
    await page.waitForSelector('#tail tbody tr.message[data-position="1"]', WAIT);
    const ports = srv.ports;
    await srv.kill();
    srv = await startServer(ports);
    const [p] = await goPublish(srv, "console.restart", ["after"]);
    assert.equal(p, 1);
    await page.waitForFunction(() => document.querySelectorAll("#tail tbody tr.message").length === 2, null, WAIT);
    const rows = await page.$$eval("#tail tbody tr", (trs) => trs.map((tr) => [tr.className, tr.cells[0].textContent, tr.cells[2].textContent]));
    assert.equal(rows.length, 3, JSON.stringify(rows));
    assert.deepEqual(rows[0], ["message", "1", "after"]);
    assert.deepEqual(rows[2], ["message", "1", "before"]);
    assert.equal(rows[1][0], "epoch");
    assert.equal(rows[1][1], "1");
    assert.match(rows[1][2], /^new incarnation of the channel \(epoch \d+\): its positions start again at 1$/);
    assert.deepEqual(b.errors.map(String), []);
  } finally {
    await b.close();
    await srv.stop();
  }
});
