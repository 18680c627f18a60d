// Helpers that run a real `sluice serve` for the integration and browser
// tests: it is built from the repository root with `go build` into a temp
// dir (or taken from $SLUICE_BIN), listens on free loopback ports, and is
// stopped by the test that started it.
import { spawn, execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import net from "node:net";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const run = promisify(execFile);

let built = null;

/** Builds ./cmd/sluice once per test process and returns the binary's path. */
export function sluiceBinary() {
  if (process.env.SLUICE_BIN) return Promise.resolve(process.env.SLUICE_BIN);
  if (!built) {
    built = (async () => {
      const dir = mkdtempSync(path.join(tmpdir(), "sluice-js-bin-"));
      process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
      const bin = path.join(dir, "sluice");
      await run("go", ["build", "-o", bin, "./cmd/sluice"], { cwd: repoRoot, maxBuffer: 16 << 20 });
      return bin;
    })();
  }
  return built;
}

/** A free TCP port on 127.0.0.1 (bound, then released for the server). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Resolves once something accepts TCP connections on port, within ms. */
async function waitListening(port, proc, ms = 20000) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`sluice serve exited with ${proc.exitCode}`);
    const ok = await new Promise((resolve) => {
      const c = net.connect(port, "127.0.0.1");
      c.once("connect", () => {
        c.destroy();
        resolve(true);
      });
      c.once("error", () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on 127.0.0.1:${port} after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Starts `sluice serve` with a TCP, a WebSocket and an HTTP listener on
 * the given (or free) ports. Extra serve flags in opts.args (a cluster node
 * without --data-dir gets a temporary one, removed when it ends);
 * opts.config is the text of a TOML config file. Returns the ports, URLs
 * and stop/kill.
 */
export async function startServer(opts = {}) {
  const bin = await sluiceBinary();
  const ports = {
    tcp: opts.tcp ?? (await freePort()),
    ws: opts.ws ?? (await freePort()),
    http: opts.http ?? (await freePort()),
  };
  const args = [
    "serve",
    "--listen", `127.0.0.1:${ports.tcp}`,
    "--ws-listen", `127.0.0.1:${ports.ws}`,
    "--http-listen", `127.0.0.1:${ports.http}`,
    "--log-level", "warn",
    ...(opts.args ?? []),
  ];
  let dir = null;
  let dataDir = null;
  if (args.includes("--cluster-listen") && !args.includes("--data-dir")) {
    // A cluster node keeps its metadata log there (by default under the
    // working directory, which is the repository's js/).
    dataDir = mkdtempSync(path.join(tmpdir(), "sluice-js-data-"));
    args.push("--data-dir", dataDir);
  }
  if (opts.config) {
    dir = mkdtempSync(path.join(tmpdir(), "sluice-js-cfg-"));
    const file = path.join(dir, "sluice.toml");
    writeFileSync(file, opts.config);
    args.push("--config", file);
  }
  const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d) => {
    if (stderr.length < 1 << 16) stderr += d;
  });
  const exited = new Promise((r) => proc.once("exit", r));
  try {
    await waitListening(ports.ws, proc);
    await waitListening(ports.http, proc);
  } catch (e) {
    proc.kill("SIGKILL");
    await exited;
    removeDirs();
    throw new Error(`${e.message}\n${stderr}`);
  }
  function removeDirs() {
    for (const d of [dir, dataDir]) if (d) rmSync(d, { recursive: true, force: true });
  }
  const end = async (signal) => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
    await exited;
    removeDirs();
  };
  return {
    ports,
    proc,
    tcpAddr: `127.0.0.1:${ports.tcp}`,
    wsURL: `ws://127.0.0.1:${ports.ws}/`,
    httpURL: `http://127.0.0.1:${ports.http}`,
    stderr: () => stderr,
    /** Graceful stop (SIGTERM). */
    stop: () => end("SIGTERM"),
    /** Abrupt end (SIGKILL): what a crash looks like to clients. */
    kill: () => end("SIGKILL"),
  };
}

/** Publishes messages with the Go SDK (the CLI's pub); resolves to their positions. */
export async function goPublish(server, channel, messages, token, extra = []) {
  const bin = await sluiceBinary();
  const args = ["pub", "--server", server.tcpAddr, "--timeout", "10s", ...extra];
  if (token) args.push("--token", token);
  args.push(channel, "--", ...messages);
  const { stdout } = await run(bin, args);
  return stdout
    .trim()
    .split("\n")
    .map((l) => {
      const p = Number(l.trim());
      if (!Number.isSafeInteger(p) || p < 1) throw new Error(`sluice pub printed ${JSON.stringify(l)}, not a position`);
      return p;
    });
}

/**
 * Resolves to the channel's SUBSCRIBED info once its earliest retained
 * position is at least upTo (its history before upTo expired), looking
 * through the SDK client c every 20 ms for at most ms.
 */
export async function waitEarliest(c, channel, upTo, ms = 10000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const s = await c.subscribe(channel, { start: "earliest" });
    const info = s.info;
    await s.unsubscribe();
    if (info.earliest >= upTo) return info;
    if (Date.now() > deadline) throw new Error(`${channel}: earliest ${info.earliest} after ${ms} ms, want ${upTo}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A TCP proxy to 127.0.0.1:port whose connections the test can cut, listening on listenPort (0: a free one). */
export function cuttableProxy(port, listenPort = 0) {
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

/** Cuts every connection of proxy and stops it taking new ones (clients retry until it is reopened). */
export async function holdOff(proxy) {
  const closing = proxy.close();
  proxy.cut();
  await closing;
}
