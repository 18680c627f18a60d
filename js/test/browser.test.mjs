// Browser tests: the web console and the SDK in headless Chromium against a
// real `sluice serve` (WebSocket gateway + HTTP listener on free ports).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { startServer, goPublish } from "./server.mjs";
import { launchBrowser } from "./browser.mjs";
import { connect } from "../dist/index.js";
import net from "node:net";

/** A TCP proxy to port whose connections the test can cut. */
function cuttableProxy(port) {
  return cuttableProxyOn(0, port);
}

/** The same, listening on listenPort (0: a free one). */
function cuttableProxyOn(listenPort, port) {
  const conns = new Set();
  const server = net.createServer((c) => {
    const up = net.connect(port, "127.0.0.1");
    const pair = [c, up];
    conns.add(pair);
    c.pipe(up);
    up.pipe(c);
    const end = () => {
      c.destroy();
      up.destroy();
      conns.delete(pair);
    };
    c.on("error", end).on("close", end);
    up.on("error", end).on("close", end);
  });
  return new Promise((resolve) =>
    server.listen(listenPort, "127.0.0.1", () =>
      resolve({
        port: server.address().port,
        /** Resets every connection through the proxy, as a network failure would. */
        cut() {
          for (const [c, up] of conns) {
            c.resetAndDestroy();
            up.destroy();
          }
          conns.clear();
        },
        close: () => new Promise((r) => server.close(r)),
      }),
    ),
  );
}

const WAIT = { timeout: 20000 };

test("console: members, channels and a typed channel's live tail with positions; screenshot", async () => {
  const srv = await startServer();
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

    // Tailing from a position before the retained history shows a gap
    // notice for what is missing, then the messages.
    const from = positions[0] - 5n;
    await page.selectOption("#tail-start", "position");
    await page.fill("#tail-position", String(from));
    await page.click("#tail-go");
    await page.waitForFunction((n) => document.querySelectorAll("#tail tbody tr.message").length === n, messages.length, WAIT);
    const tailRows = await page.$$eval("#tail tbody tr", (trs) => trs.map((tr) => [tr.className, tr.cells[0].textContent, tr.cells[2].textContent]));
    assert.deepEqual(tailRows, [
      ...positions.map((p, i) => ["message", String(p), messages[i]]).reverse(),
      ["gap", `${from}–${positions[0] - 1n}`, "gap: 5 messages not delivered (expired)"],
    ]);

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
    const after = evs.slice(epochIdx + 1).filter((e) => e.kind === "message");
    assert.deepEqual(after.at(-1), { kind: "message", position: afterPos, text: "after restart" });
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
    const closing = proxy.close();
    proxy.cut();
    await closing;
    await page.waitForFunction(() => window.states.includes("disconnected"), null, WAIT);
    const during = await goPublish(srv, "browser.cut", ["d1", "d2", "d3"]);
    // Let the page back in on the same port.
    const proxy2 = await cuttableProxyOn(proxy.port, srv.ports.ws);
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
