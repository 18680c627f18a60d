// Presence and occupancy (PROTOCOL.md 2.18, docs/presence.md): the codec of
// the frames 0x12..0x15 and the member set a subscription keeps.

import { frame, HEADER_LEN, MAX_CHANNEL_LEN, MalformedFrameError, Reader, utf8, validChannel } from "./codec.js";

/** Frame types of presence (0x16 is reserved). */
export const PresenceType = {
  PRESENCE: 0x12,
  PRESENCE_STATE: 0x13,
  PRESENCE_EVENT: 0x14,
  OCCUPANCY: 0x15,
} as const;

/** Feature bit of presence in HELLO and WELCOME. */
export const FEATURE_PRESENCE = 1 << 4;

/** SUBSCRIBE flags of presence (after FEATURE_PRESENCE). */
export const FLAG_PRESENCE = 0x10;
export const FLAG_PRESENCE_EVENTS = 0x20;
export const FLAG_OCCUPANCY = 0x40;
/** PRESENCE: answer the occupancy alone. */
export const FLAG_COUNTS_ONLY = 0x01;
/** PRESENCE_STATE: another frame of the answer follows. */
export const FLAG_MORE = 0x01;
/** PRESENCE_STATE: the answering node holds fewer members than the channel has. */
export const FLAG_PARTIAL = 0x02;
/** OCCUPANCY: the channel's joins and leaves are not sent until an OCCUPANCY without it. */
export const FLAG_EVENTS_PAUSED = 0x01;

export const MAX_CLIENT_ID_LEN = 255;
export const MAX_CLIENT_INFO_LEN = 4096;
const MEMBER_MIN_LEN = 13;

/** A channel's counts, over every node. */
export interface Occupancy {
  /** Its subscriptions. */
  subscribers: number;
  /** The open connections that published to it lately. */
  publishers: number;
  /** Its presence members. */
  members: number;
}

/** One presence member: a connection subscribed with `presence: true`. */
export interface Member {
  /** Its token's subject (or static token's name); "" without. */
  clientId: string;
  /** The node it is connected to, and its connection's id there. */
  node: string;
  conn: bigint;
  /** Its token's client info (JSON from a JWT's info claim), empty without. */
  info: Uint8Array;
}

/** A join or leave as the wire carries it. */
export interface PresenceChange {
  kind: "join" | "leave";
  member: Member;
}

const dec = new TextDecoder("utf-8", { fatal: false });

/** A PRESENCE frame (a query; countsOnly: the occupancy alone). */
export function encodePresence(id: number, channel: string | Uint8Array, countsOnly = false): Uint8Array {
  const ch = validChannel(channel);
  const w = frame(PresenceType.PRESENCE, countsOnly ? FLAG_COUNTS_ONLY : 0, id, 1 + ch.length);
  w.u8(ch.length);
  w.bytes(ch);
  return w.buf;
}

export function decodePresence(body: Uint8Array): string {
  const d = new Reader(body, "PRESENCE");
  const n = d.u8("channelLen");
  if (d.err === null && n === 0) d.fail("empty channel");
  const ch = d.bytes(n, "channel");
  d.exact();
  d.check();
  return dec.decode(ch);
}

function memberLen(m: Member): number {
  return 1 + utf8(m.clientId).length + 1 + utf8(m.node).length + 8 + 2 + m.info.length;
}

function writeMember(w: ReturnType<typeof frame>, m: Member) {
  const id = utf8(m.clientId);
  const node = utf8(m.node);
  if (id.length > MAX_CLIENT_ID_LEN || node.length === 0 || node.length > MAX_CHANNEL_LEN || m.info.length > MAX_CLIENT_INFO_LEN) {
    throw new RangeError("presence member fields out of range");
  }
  w.u8(id.length);
  w.bytes(id);
  w.u8(node.length);
  w.bytes(node);
  w.u64big(m.conn);
  w.u16(m.info.length);
  w.bytes(m.info);
}

function readMember(d: Reader): Member {
  const clientId = dec.decode(d.bytes(d.u8("clientIDLen"), "clientID"));
  const nl = d.u8("nodeLen");
  if (d.err === null && nl === 0) d.fail(`empty node name at offset ${d.off - 1}`);
  const node = dec.decode(d.bytes(nl, "node"));
  const conn = d.u64big("conn");
  const il = d.u16("infoLen");
  if (d.err === null && il > MAX_CLIENT_INFO_LEN) d.fail(`client info length ${il} exceeds ${MAX_CLIENT_INFO_LEN}`);
  const info = d.bytes(il, "info").slice();
  return { clientId, node, conn, info };
}

function readOcc(d: Reader): Occupancy {
  return { subscribers: d.u32("subscribers"), publishers: d.u32("publishers"), members: d.u32("members") };
}

/** A PRESENCE_STATE frame (for tests and fake servers). */
export function encodePresenceState(id: number, flags: number, o: Occupancy, members: Member[]): Uint8Array {
  const w = frame(PresenceType.PRESENCE_STATE, flags, id, 14 + members.reduce((n, m) => n + memberLen(m), 0));
  w.u32(o.subscribers);
  w.u32(o.publishers);
  w.u32(o.members);
  w.u16(members.length);
  for (const m of members) writeMember(w, m);
  return w.buf;
}

export function decodePresenceState(body: Uint8Array): { occupancy: Occupancy; members: Member[] } {
  const d = new Reader(body, "PRESENCE_STATE");
  const occupancy = readOcc(d);
  const count = d.u16("count");
  if (d.err === null && count > Math.floor((body.length - d.off) / MEMBER_MIN_LEN)) {
    d.fail(`${count} members cannot fit in ${body.length - d.off} bytes`);
  }
  d.check();
  const members: Member[] = [];
  for (let i = 0; i < count && d.err === null; i++) members.push(readMember(d));
  d.exact();
  d.check();
  return { occupancy, members };
}

/** A PRESENCE_EVENT frame for subscription subID (for tests and fake servers). */
export function encodePresenceEvent(subID: number, changes: PresenceChange[]): Uint8Array {
  const w = frame(PresenceType.PRESENCE_EVENT, 0, subID, 2 + changes.reduce((n, c) => n + 1 + memberLen(c.member), 0));
  w.u16(changes.length);
  for (const c of changes) {
    w.u8(c.kind === "join" ? 1 : 2);
    writeMember(w, c.member);
  }
  return w.buf;
}

export function decodePresenceEvent(body: Uint8Array): PresenceChange[] {
  const d = new Reader(body, "PRESENCE_EVENT");
  const count = d.u16("count");
  if (d.err === null && count === 0) d.fail("change count 0");
  if (d.err === null && count > Math.floor((body.length - d.off) / (1 + MEMBER_MIN_LEN))) {
    d.fail(`${count} changes cannot fit in ${body.length - d.off} bytes`);
  }
  d.check();
  const out: PresenceChange[] = [];
  for (let i = 0; i < count && d.err === null; i++) {
    const k = d.u8("kind");
    if (d.err === null && k !== 1 && k !== 2) d.fail(`change ${i}: kind ${k} undefined`);
    out.push({ kind: k === 1 ? "join" : "leave", member: readMember(d) });
  }
  d.exact();
  d.check();
  return out;
}

/** An OCCUPANCY frame for subscription subID (for tests and fake servers). */
export function encodeOccupancy(subID: number, paused: boolean, o: Occupancy): Uint8Array {
  const w = frame(PresenceType.OCCUPANCY, paused ? FLAG_EVENTS_PAUSED : 0, subID, 12);
  w.u32(o.subscribers);
  w.u32(o.publishers);
  w.u32(o.members);
  return w.buf;
}

export function decodeOccupancy(body: Uint8Array): Occupancy {
  const d = new Reader(body, "OCCUPANCY");
  const o = readOcc(d);
  d.exact();
  d.check();
  return o;
}

/** Sets a whole frame's header flags (SUBSCRIBE's presence flags). */
export function withFlags(f: Uint8Array, flags: number): Uint8Array {
  if (f.length < HEADER_LEN) throw new MalformedFrameError("not a frame");
  f[5] = flags;
  return f;
}

/** The presence flags a SUBSCRIBE carries for these options. */
export function subscribeFlags(o: { presence?: boolean; presenceEvents?: boolean; occupancy?: boolean }): number {
  return (o.presence ? FLAG_PRESENCE : 0) | (o.presenceEvents ? FLAG_PRESENCE_EVENTS : 0) | (o.occupancy ? FLAG_OCCUPANCY : 0);
}

/** Orders members by client id, node and connection. */
export function sortMembers(ms: Member[]): Member[] {
  return ms.sort((a, b) =>
    a.clientId !== b.clientId ? (a.clientId < b.clientId ? -1 : 1) : a.node !== b.node ? (a.node < b.node ? -1 : 1) : a.conn < b.conn ? -1 : a.conn > b.conn ? 1 : 0,
  );
}

const keyOf = (m: Member) => `${m.clientId}\u0000${m.node}\u0000${m.conn}`;

/**
 * The member set a subscription with presenceEvents keeps: the answer of
 * a query sent after each SUBSCRIBED (and after a resume from a pause),
 * with the joins and leaves after it applied. Joins and leaves that come
 * before the answer are in it (the server sends in order), so they are
 * not applied.
 */
export class MemberSet {
  private readonly m = new Map<string, Member>();
  /** The query's request id while its answer is awaited; 0 otherwise. */
  syncing = 0;
  private synced = false;
  private partial = false;
  private paused = false;

  /** A query was sent with request id. */
  started(id: number) {
    this.syncing = id;
    this.synced = false;
  }

  /** The query's answer. */
  answered(members: Member[], partial: boolean) {
    this.syncing = 0;
    this.m.clear();
    for (const x of members) this.m.set(keyOf(x), x);
    this.synced = !this.paused;
    this.partial = partial;
  }

  /** A join or leave delivered to the subscription. */
  apply(c: PresenceChange) {
    if (!this.synced) return;
    if (c.kind === "join") this.m.set(keyOf(c.member), c.member);
    else this.m.delete(keyOf(c.member));
  }

  /** An occupancy's EVENTS_PAUSED; true when a resume asks for a new query. */
  pause(paused: boolean): boolean {
    const was = this.paused;
    this.paused = paused;
    if (paused) this.synced = false;
    return was && !paused && this.syncing === 0;
  }

  /** The set, sorted; complete unless not yet answered, paused or partial. */
  snapshot(): { members: Member[]; complete: boolean } {
    return { members: sortMembers([...this.m.values()]), complete: this.synced && !this.partial };
  }
}
