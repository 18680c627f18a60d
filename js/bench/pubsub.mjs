// Throughput of the TypeScript SDK in Node.js over the WebSocket gateway,
// beside the Go SDK over TCP against the same server in the same run:
//
//   node bench/pubsub.mjs [--count N] [--size BYTES]
//
// It starts one `sluice serve` (free loopback ports; SLUICE_BIN or a fresh
// go build) and measures, each for --count messages of --size bytes:
//   js ack-async  the SDK's pipelined acknowledged publish (maxPending 1024)
//   js 1:1        one SDK publisher (acked, pipelined) and one SDK subscriber
//                 on one channel: delivered messages per second
//   go ack-async  `sluice bench ack-async` (the Go SDK, TCP) against the same server
// and prints msg/s, the ratio to Go, and the Node process's CPU per message.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { connect } from "../dist/index.js";
import { startServer, sluiceBinary } from "../test/server.mjs";

const args = process.argv.slice(2);
const opt = (name, def) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 ? Number(args[i + 1]) : def;
};
const COUNT = opt("count", 200000);
const SIZE = opt("size", 128);
const run = promisify(execFile);

function cpuMs(start) {
  const u = process.cpuUsage(start);
  return (u.user + u.system) / 1000;
}

async function jsAckAsync(srv) {
  const c = await connect(srv.wsURL);
  const payload = new Uint8Array(SIZE).fill(97);
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  let last = 0;
  const inflight = [];
  for (let i = 0; i < COUNT; i++) {
    inflight.push(c.publish("bench.ack", payload));
    if (inflight.length >= 1024) {
      last = await inflight[0];
      inflight.shift();
    }
  }
  for (const p of inflight) last = await p;
  const secs = (performance.now() - t0) / 1000;
  const cpu = cpuMs(cpu0);
  await c.drain();
  return { rate: COUNT / secs, cpuUsPerMsg: (cpu * 1000) / COUNT, last };
}

async function js1to1(srv) {
  const pub = await connect(srv.wsURL);
  const subc = await connect(srv.wsURL);
  const payload = new Uint8Array(SIZE).fill(98);
  let got = 0;
  let gaps = 0;
  let done;
  const finished = new Promise((r) => (done = r));
  await subc.subscribe("bench.1to1", {
    onEvent: (ev) => {
      if (ev.kind === "message") got++;
      else gaps++;
      if (got === COUNT) done();
    },
  });
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const inflight = [];
  for (let i = 0; i < COUNT; i++) {
    inflight.push(pub.publish("bench.1to1", payload));
    if (inflight.length >= 1024) await inflight.shift();
  }
  await Promise.all(inflight);
  await finished;
  const secs = (performance.now() - t0) / 1000;
  const cpu = cpuMs(cpu0);
  pub.close();
  subc.close();
  return { rate: COUNT / secs, cpuUsPerMsg: (cpu * 1000) / COUNT, gaps };
}

async function goAckAsync(srv) {
  const bin = await sluiceBinary();
  const { stdout } = await run(bin, ["bench", `ack-async/size=${SIZE},count=${COUNT}`, "--server", srv.tcpAddr, "--json", "--progress", "off"], {
    maxBuffer: 16 << 20,
  });
  const res = JSON.parse(stdout);
  const r = Array.isArray(res) ? res[0] : res;
  return { rate: r.pub_msgs_per_sec, raw: r };
}

const srv = await startServer();
try {
  const go = await goAckAsync(srv);
  const ack = await jsAckAsync(srv);
  const one = await js1to1(srv);
  const f = (x) => Math.round(x).toLocaleString("en");
  console.log(`count ${COUNT}, size ${SIZE} B, node ${process.version}`);
  console.log(`go  ack-async (TCP)  ${f(go.rate)} msg/s`);
  console.log(`js  ack-async (WS)   ${f(ack.rate)} msg/s  ratio to go ${(ack.rate / go.rate).toFixed(2)}  node CPU ${ack.cpuUsPerMsg.toFixed(2)} us/msg`);
  console.log(`js  1:1       (WS)   ${f(one.rate)} msg/s delivered, gaps ${one.gaps}  node CPU (both clients) ${one.cpuUsPerMsg.toFixed(2)} us/msg`);
  if (!go.rate) console.log("go result:", JSON.stringify(go.raw));
} finally {
  await srv.stop();
}
