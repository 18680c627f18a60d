// Presence in the TypeScript SDK (PROTOCOL.md 2.18, docs/presence.md): the
// golden vectors of wire/testdata/presence both ways, malformed frames, and
// the session logic against the scripted server of fakenet.mjs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { connect, codec, presence, ServerError, PresenceUnsupportedError, ProtocolError } from "../dist/index.js";
import { FakeNet } from "./fakenet.mjs";

const testdata = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "wire", "testdata", "presence");

function readHex(name) {
  const digits = readFileSync(path.join(testdata, name + ".hex"), "utf8")
    .split("\n")
    .map((l) => l.split("#")[0].replace(/\s+/g, ""))
    .join("");
  return Uint8Array.from(digits.match(/../g) ?? [], (h) => parseInt(h, 16));
}

const te = new TextEncoder();
const b = (s) => te.encode(s);
const alice = { clientId: "alice", node: "a", conn: 7n, info: b('{"n":"Al"}') };
const anon = { clientId: "", node: "b", conn: 12n, info: new Uint8Array(0) };
const bob = { clientId: "bob", node: "b", conn: 3n, info: new Uint8Array(0) };

// name -> [header, value, encode(), decode(header, body)]; the node frames
// (sync, sync_result) are the Go side's only.
const cases = {
  presence: [{ type: 0x12, flags: 0, id: 9 }, "room.1", (v) => presence.encodePresence(9, v), (h, body) => presence.decodePresence(body)],
  presence_counts: [{ type: 0x12, flags: 1, id: 10 }, "room.1", (v) => presence.encodePresence(10, v, true), (h, body) => presence.decodePresence(body)],
  presence_state: [
    { type: 0x13, flags: 0, id: 9 },
    { occupancy: { subscribers: 3, publishers: 1, members: 2 }, members: [alice, anon] },
    (v) => presence.encodePresenceState(9, 0, v.occupancy, v.members),
    (h, body) => presence.decodePresenceState(body),
  ],
  presence_event: [
    { type: 0x14, flags: 0, id: 4 },
    [{ kind: "join", member: alice }, { kind: "leave", member: bob }],
    (v) => presence.encodePresenceEvent(4, v),
    (h, body) => presence.decodePresenceEvent(body),
  ],
  occupancy: [
    { type: 0x15, flags: 1, id: 4 },
    { subscribers: 1200, publishers: 3, members: 150 },
    (v) => presence.encodeOccupancy(4, true, v),
    (h, body) => presence.decodeOccupancy(body),
  ],
  subscribe_presence: [
    { type: 0x05, flags: 0x70, id: 11 },
    { subID: 4, start: 0, arg: 0, epoch: 0, channel: "room.1" },
    (v) => presence.withFlags(codec.encodeSubscribe(11, v), presence.subscribeFlags({ presence: true, presenceEvents: true, occupancy: true })),
    (h, body) => codec.decodeSubscribe(body),
  ],
  hello_presence: [
    { type: 0x01, flags: 0, id: 1 },
    { minVersion: 1, maxVersion: 1, features: presence.FEATURE_PRESENCE, name: "web", token: new Uint8Array(0) },
    (v) => codec.encodeHello(1, v),
    (h, body) => codec.decodeHello(body),
  ],
};

function plain(v) {
  if (v instanceof Uint8Array) return Array.from(v);
  if (Array.isArray(v)) return v.map(plain);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]));
  return v;
}

test("every client golden vector of presence has a case", () => {
  const files = readdirSync(testdata).filter((f) => f.endsWith(".hex") && !f.startsWith("sync")).map((f) => f.slice(0, -4)).sort();
  assert.deepEqual(files, Object.keys(cases).sort());
});

for (const [name, [hdr, value, encode, decode]] of Object.entries(cases)) {
  test(`presence golden ${name}: encode gives the bytes, the bytes decode to the value`, () => {
    const golden = readHex(name);
    assert.deepEqual(Array.from(encode(value)), Array.from(golden), "encoded bytes");
    const f = codec.decodeFrame(golden, 1 << 20);
    assert.deepEqual({ type: f.header.type, flags: f.header.flags, id: f.header.id }, hdr);
    assert.deepEqual(plain(decode(f.header, f.body)), plain(value));
  });
}

const hex = (s) => Uint8Array.from(s.replace(/\s+/g, "").match(/../g) ?? [], (h) => parseInt(h, 16));
const occ = "00000001 00000002 00000003";
for (const [what, fn, re] of [
  ["PRESENCE empty channel", () => presence.decodePresence(hex("00")), /empty channel/],
  ["PRESENCE trailing", () => presence.decodePresence(hex("01 61 62")), /trailing/],
  ["STATE count too large", () => presence.decodePresenceState(hex(occ + "0002 00 01 61 0000000000000001 0000")), /cannot fit/],
  ["STATE empty node", () => presence.decodePresenceState(hex(occ + "0001 00 00 0000000000000001 0000 00")), /empty node/],
  ["STATE info too long", () => presence.decodePresenceState(hex(occ + "0001 00 01 61 0000000000000001 1001")), /client info length 4097/],
  ["EVENT count 0", () => presence.decodePresenceEvent(hex("0000")), /change count 0/],
  ["EVENT kind 3", () => presence.decodePresenceEvent(hex("0001 03 00 01 61 0000000000000001 0000")), /kind 3 undefined/],
  ["OCCUPANCY short", () => presence.decodeOccupancy(hex("00000001 00000002")), /members/],
]) {
  test(`presence malformed: ${what}`, () => assert.throws(fn, (e) => e instanceof codec.MalformedFrameError && re.test(e.message)));
}

const T = codec.FrameType;

async function setup() {
  const net = new FakeNet();
  net.welcome.features = presence.FEATURE_PRESENCE;
  const c = await connect("ws://a/", { WebSocket: net.WebSocket, backoffMinMs: 1, backoffMaxMs: 5 });
  const ws = await net.conn(0);
  return { net, c, ws };
}

test("presence() gathers the answer's frames, occupancy() asks for the counts; refusals reject", async () => {
  const { net, c, ws } = await setup();
  assert.equal(ws.hello.features & presence.FEATURE_PRESENCE, presence.FEATURE_PRESENCE);
  const o = { subscribers: 5, publishers: 1, members: 3 };
  const p = c.presence("room");
  const q = await net.frame(ws, presence.PresenceType.PRESENCE);
  assert.equal(q.v, "room");
  net.push(ws, presence.encodePresenceState(q.id, presence.FLAG_MORE | presence.FLAG_PARTIAL, o, [bob, alice]));
  net.push(ws, presence.encodePresenceState(q.id, presence.FLAG_PARTIAL, o, [anon]));
  const st = await p;
  assert.deepEqual(st.occupancy, o);
  assert.equal(st.partial, true);
  assert.deepEqual(st.members.map((m) => m.clientId), ["", "alice", "bob"]);
  const po = c.occupancy("room");
  const q2 = await net.frame(ws, presence.PresenceType.PRESENCE);
  assert.equal(q2.flags, presence.FLAG_COUNTS_ONLY);
  net.push(ws, presence.encodePresenceState(q2.id, 0, o, []));
  assert.deepEqual(await po, o);
  const pf = c.presence("secret");
  const q3 = await net.frame(ws, presence.PresenceType.PRESENCE);
  net.push(ws, codec.encodeError(q3.id, { code: codec.CODE_FORBIDDEN, retriable: false, text: "no" }));
  await assert.rejects(pf, (e) => e instanceof ServerError && e.codeName === "FORBIDDEN");
  c.close();
});

test("a server without presence: presence() rejects before sending, presence frames are a protocol violation", async () => {
  const net = new FakeNet();
  const c = await connect("ws://a/", { WebSocket: net.WebSocket, reconnect: false });
  const ws = await net.conn(0);
  await assert.rejects(c.presence("room"), (e) => e instanceof PresenceUnsupportedError);
  const closed = c.closed.catch(() => {});
  net.push(ws, presence.encodeOccupancy(1, false, { subscribers: 0, publishers: 0, members: 0 }));
  await closed;
  assert.ok(ws.closed);
});

test("a presenceEvents subscription delivers joins, leaves and counts and keeps the member set", async () => {
  const { net, c, ws } = await setup();
  const p = c.subscribe("room", { presence: true, presenceEvents: true, occupancy: true });
  const fr = await net.frame(ws, T.SUBSCRIBE);
  assert.equal(fr.flags, 0x70);
  net.push(ws, codec.encodeSubscribed(fr.id, { subID: fr.v.subID, first: 1, earliest: 1, next: 1, epoch: 1 }));
  const sub = await p;
  const q = await net.frame(ws, presence.PresenceType.PRESENCE);
  assert.equal(sub.members().complete, false);
  const me = { clientId: "me", node: "a", conn: 1n, info: new Uint8Array(0) };
  const cy = { clientId: "cy", node: "c", conn: 3n, info: b("x") };
  net.push(ws, presence.encodeOccupancy(fr.v.subID, false, { subscribers: 3, publishers: 0, members: 2 }));
  net.push(ws, presence.encodePresenceEvent(fr.v.subID, [{ kind: "join", member: bob }])); // before the answer: in it
  net.push(ws, presence.encodePresenceState(q.id, 0, { subscribers: 3, publishers: 0, members: 2 }, [me, bob]));
  net.push(ws, presence.encodePresenceEvent(fr.v.subID, [{ kind: "join", member: cy }, { kind: "leave", member: bob }]));
  const got = [];
  for (let i = 0; i < 4; i++) {
    const ev = (await sub.next()).value;
    got.push(ev.kind === "occupancy" ? `occ ${ev.occupancy.members}` : `${ev.kind} ${ev.member.clientId}`);
  }
  assert.deepEqual(got, ["occ 2", "join bob", "join cy", "leave bob"]);
  let m = sub.members();
  assert.equal(m.complete, true);
  assert.deepEqual(m.members.map((x) => x.clientId), ["cy", "me"]);
  net.push(ws, presence.encodeOccupancy(fr.v.subID, true, { subscribers: 500, publishers: 0, members: 500 }));
  const pausedEv = (await sub.next()).value;
  assert.equal(pausedEv.eventsPaused, true);
  assert.equal(sub.members().complete, false);
  net.push(ws, presence.encodeOccupancy(fr.v.subID, false, { subscribers: 2, publishers: 0, members: 2 }));
  await sub.next();
  const q2 = await net.frame(ws, presence.PresenceType.PRESENCE);
  net.push(ws, presence.encodePresenceState(q2.id, 0, { subscribers: 2, publishers: 0, members: 2 }, [me, alice]));
  await net.until(() => sub.members().complete || undefined, "the resync");
  m = sub.members();
  assert.deepEqual(m.members.map((x) => x.clientId), ["alice", "me"]);
  c.close();
});

test("a resume after a reconnect subscribes again with the presence flags and syncs the set again", async () => {
  const { net, c, ws } = await setup();
  const p = c.subscribe("room", { presence: true, presenceEvents: true });
  const fr = await net.frame(ws, T.SUBSCRIBE);
  net.push(ws, codec.encodeSubscribed(fr.id, { subID: fr.v.subID, first: 1, earliest: 1, next: 1, epoch: 1 }));
  const sub = await p;
  const q = await net.frame(ws, presence.PresenceType.PRESENCE);
  net.push(ws, presence.encodePresenceState(q.id, 0, { subscribers: 1, publishers: 0, members: 1 }, [alice]));
  net.drop(ws);
  const ws2 = await net.conn(1);
  const fr2 = await net.frame(ws2, T.SUBSCRIBE);
  assert.equal(fr2.flags, presence.FLAG_PRESENCE | presence.FLAG_PRESENCE_EVENTS);
  net.push(ws2, codec.encodeSubscribed(fr2.id, { subID: fr2.v.subID, first: 1, earliest: 1, next: 1, epoch: 1 }));
  const q2 = await net.frame(ws2, presence.PresenceType.PRESENCE);
  net.push(ws2, presence.encodePresenceState(q2.id, 0, { subscribers: 1, publishers: 0, members: 1 }, [bob]));
  await net.until(() => (sub.members().members[0]?.clientId === "bob") || undefined, "the set after the resume");
  c.close();
});

test("presence frames for a subscription that did not ask for them are dropped", async () => {
  const { net, c, ws } = await setup();
  const p = c.subscribe("room");
  const fr = await net.frame(ws, T.SUBSCRIBE);
  assert.equal(fr.flags, 0);
  net.push(ws, codec.encodeSubscribed(fr.id, { subID: fr.v.subID, first: 1, earliest: 1, next: 1, epoch: 1 }));
  const sub = await p;
  net.push(ws, presence.encodePresenceEvent(fr.v.subID, [{ kind: "join", member: bob }]));
  net.push(ws, presence.encodeOccupancy(fr.v.subID, false, { subscribers: 1, publishers: 0, members: 0 }));
  net.push(ws, codec.encodeData(fr.v.subID, 1, [b("m")]));
  const ev = (await sub.next()).value;
  assert.equal(ev.kind, "message");
  c.close();
});
