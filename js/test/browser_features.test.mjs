// JWT refresh and filters in headless Chromium: the SDK in a page mints
// its own HS256 tokens with WebCrypto (an implementation independent of
// the server's JWT library) and refreshes them on the open connection; the
// web console tails a channel through a filter.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { startServer, goPublish } from "./server.mjs";
import { launchBrowser } from "./browser.mjs";
import { JWT_SECRET, jwtConfig } from "./jwtutil.mjs";

const WAIT = { timeout: 20000 };
const PUB = "js-publisher-token-0123456789";

test("SDK in the page: a token provider with 2-second JWTs refreshes them on the open connection; the subscription keeps receiving; a fixed token is closed with TOKEN_EXPIRED", async () => {
  const srv = await startServer({ config: jwtConfig(PUB) });
  const b = await launchBrowser();
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/config.json`);
    await page.evaluate(
      async ({ wsURL, secret }) => {
        const sluice = await import("/console/sluice.js");
        const enc = new TextEncoder();
        const b64 = (u8) => btoa(String.fromCharCode(...u8)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
        const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
        const mint = async (claims) => {
          const input = b64(enc.encode(JSON.stringify({ alg: "HS256", typ: "JWT", kid: "k" }))) + "." + b64(enc.encode(JSON.stringify(claims)));
          return input + "." + b64(new Uint8Array(await crypto.subtle.sign("HMAC", key, enc.encode(input))));
        };
        const w = window;
        w.calls = 0;
        w.states = [];
        w.events = [];
        w.client = await sluice.connect(wsURL, {
          tokenProvider: () => {
            w.calls++;
            return mint({ sub: "page", exp: Math.floor(Date.now() / 1000) + 2, caps: { subscribe: ["page.>"] } });
          },
          onState: (e) => w.states.push(e.state),
        });
        const td = new TextDecoder();
        w.sub = await w.client.subscribe("page.jwt", {
          onEvent: (ev) => ev.kind === "message" && w.events.push({ position: String(ev.position), text: td.decode(ev.payload) }),
        });
        // A second client with one fixed token and no provider.
        w.fixedErrors = [];
        w.fixed = await sluice.connect(wsURL, {
          token: await mint({ sub: "fixed", exp: Math.floor(Date.now() / 1000) + 1, caps: { subscribe: ["page.>"] } }),
          backoffMinMs: 10,
          backoffMaxMs: 50,
          onState: (e) => e.error && w.fixedErrors.push(e.error.message),
        });
      },
      { wsURL: srv.wsURL, secret: JWT_SECRET },
    );
    await page.waitForFunction(() => window.client.tokenRefreshes >= 2, null, WAIT);
    const [p] = await goPublish(srv, "page.jwt", ["after two refreshes"], PUB);
    await page.waitForFunction(() => window.events.length === 1, null, WAIT);
    assert.deepEqual(await page.evaluate(() => window.events), [{ position: String(p), text: "after two refreshes" }]);
    assert.deepEqual(await page.evaluate(() => window.states), ["connected"], "refreshed without a reconnect");
    assert.equal(await page.evaluate(() => window.client.clientId), "page");
    assert.equal(await page.evaluate(() => window.calls - window.client.tokenRefreshes), 1);

    await page.evaluate(() => window.fixed.closed);
    const errs = await page.evaluate(() => window.fixedErrors);
    assert.ok(errs.some((m) => /TOKEN_EXPIRED/.test(m)), errs.join("; "));
    assert.match(errs.at(-1), /UNAUTHENTICATED: token expired/);
    assert.deepEqual(b.errors.map(String), []);
  } finally {
    await b.close();
    await srv.stop();
  }
});

test("console: the live tail with a filter shows only the matching messages at their positions; a bad filter is refused with its reason; screenshot", async () => {
  const srv = await startServer();
  const b = await launchBrowser();
  try {
    const { page } = b;
    await page.goto(`${srv.httpURL}/console/`);
    await page.waitForSelector('#conn[data-state="connected"]', WAIT);
    await page.fill("#tail-channel", "console.filtered");
    await page.fill("#tail-filter", 'headers.type == "trade" && payload.price > 100');
    await page.click("#tail-go");
    await page.waitForFunction(() => document.querySelector("#tail-status").textContent.includes("only where"), null, WAIT);
    const msgs = [
      ["trade", '{"price": 101}'],
      ["quote", '{"price": 150}'],
      ["trade", '{"price": 99}'],
      ["trade", '{"price": 120.5}'],
    ];
    const positions = [];
    for (const [typ, m] of msgs) positions.push(...(await goPublish(srv, "console.filtered", [m], undefined, ["--header", `type=${typ}`])));
    await page.waitForFunction(() => document.querySelectorAll("#tail tbody tr.message").length === 2, null, WAIT);
    const rows = await page.$$eval("#tail tbody tr.message", (trs) => trs.map((tr) => [tr.dataset.position, tr.cells[2].textContent]));
    assert.deepEqual(rows, [
      [String(positions[3]), 'type: trade{"price": 120.5}'],
      [String(positions[0]), 'type: trade{"price": 101}'],
    ]);
    assert.equal(await page.$$eval("#tail tbody tr.gap", (trs) => trs.length), 0, "holes are not gaps");
    const dir = mkdtempSync(path.join(tmpdir(), "sluice-console-"));
    const shot = path.join(dir, "console-filter.png");
    await page.screenshot({ path: shot, fullPage: true });
    console.log(`console screenshot: ${shot}`);

    await page.fill("#tail-filter", "payload.price >");
    await page.click("#tail-go");
    await page.waitForFunction(() => document.querySelector("#tail-status").textContent.startsWith("refused: INVALID_FILTER"), null, WAIT);
    assert.deepEqual(b.errors.map(String), []);
  } finally {
    await b.close();
    await srv.stop();
  }
});
