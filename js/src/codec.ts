// The protocol v1 codec (PROTOCOL.md), the TypeScript twin of the Go
// package wire. Encoders return whole frames (10-byte header + body);
// decoders take one whole frame, check every declared length against the
// bytes present and the receiver's body limit before reading further, and
// throw a MalformedFrameError that names the frame, the field and the
// offset. Over WebSocket each binary message is exactly one frame, so
// there is no stream splitting here: decodeFrame also refuses a message
// that holds more or fewer bytes than its header declares.
//
// Integers are big-endian. Positions, epochs and start arguments are u64 on
// the wire and plain numbers here (a channel's positions count from 1
// within its epoch, and an epoch is about the creation time in
// milliseconds: both stay far below 2^53). A decoder refuses a u64 above
// Number.MAX_SAFE_INTEGER as malformed, naming the field, rather than
// round it; an encoder refuses a number that is not a safe non-negative
// integer.

export const HEADER_LEN = 10;
export const VERSION_1 = 1;
export const MAX_CHANNEL_LEN = 255;
export const MAX_TOKEN_LEN = 4096;
export const MAX_NAME_LEN = 255;
/** The smallest body limit; also a client's limit before WELCOME arrives. */
export const MIN_MAX_BODY = 8192;
export const DATA_PREFIX_LEN = 12;
/**
 * The largest position, epoch or start argument this SDK represents
 * (2^53-1, Number.MAX_SAFE_INTEGER): larger u64 values are refused.
 */
export const MAX_U64_NUMBER = Number.MAX_SAFE_INTEGER;

/** Frame types of protocol v1 (PROTOCOL.md 2). */
export const FrameType = {
  HELLO: 0x01,
  WELCOME: 0x02,
  PUBLISH: 0x03,
  PUBACK: 0x04,
  SUBSCRIBE: 0x05,
  SUBSCRIBED: 0x06,
  UNSUBSCRIBE: 0x07,
  DATA: 0x08,
  GAP: 0x09,
  PING: 0x0a,
  PONG: 0x0b,
  ERROR: 0x0c,
  GOAWAY: 0x0d,
  UNSUBSCRIBED: 0x0e,
  REFRESH: 0x0f,
  AUTHED: 0x10,
  FDATA: 0x11,
} as const;
export type FrameTypeValue = (typeof FrameType)[keyof typeof FrameType];

const typeNames: Record<number, string> = Object.fromEntries(
  Object.entries(FrameType).map(([k, v]) => [v, k]),
);

/** The protocol name of a frame type, e.g. "PUBLISH", or "Type(0xNN)". */
export function typeName(t: number): string {
  return typeNames[t] ?? `Type(0x${t.toString(16).padStart(2, "0").toUpperCase()})`;
}

export const FLAG_ACK = 0x01;
/** On PUBLISH: the body after the channel is an extended record body (PROTOCOL.md 2.14). */
export const FLAG_EXT = 0x02;
export const FLAG_RETRIABLE = 0x01;
export const FLAG_COMPRESSED = 0x80;
/** On SUBSCRIBE: a filter expression follows the channel (PROTOCOL.md 2.17). */
export const FLAG_FILTER = 0x01;

/** Feature bits of HELLO and WELCOME (PROTOCOL.md 2.13). */
export const FEATURE_S2 = 1 << 0;
export const FEATURE_HEADERS = 1 << 1;
/** Credentials that expire: AUTHED and REFRESH (PROTOCOL.md 2.16). */
export const FEATURE_REFRESH = 1 << 2;
/** Server-side filters: SUBSCRIBE with FILTER, FDATA (PROTOCOL.md 2.17). */
export const FEATURE_FILTERS = 1 << 3;

/** A record length word's top bit: the record is extended (PROTOCOL.md 2.14). */
export const RECORD_EXT = 0x80000000;
export const EXT_MSGID = 0x01;
export const EXT_HEADERS = 0x02;
export const MAX_MSGID_LEN = 255;
export const MAX_HEADERS = 64;
export const MAX_HEADERS_LEN = 8192;
export const MAX_HEADER_KEY_LEN = 255;

/** Start kinds of SUBSCRIBE (PROTOCOL.md 2.5). */
export const StartKind = { LIVE: 0, EARLIEST: 1, POSITION: 2, LAST: 3, SINCE: 4 } as const;

/** Gap reasons of GAP (PROTOCOL.md 2.9). */
export const GapReason = { EXPIRED: 1, SLOW: 2, LOST: 3 } as const;
export type GapReasonName = "expired" | "slow" | "lost";
export function gapReasonName(r: number): GapReasonName {
  switch (r) {
    case GapReason.EXPIRED:
      return "expired";
    case GapReason.SLOW:
      return "slow";
    case GapReason.LOST:
      return "lost";
  }
  throw new RangeError(`undefined gap reason ${r}`);
}

/** Error codes (PROTOCOL.md 7.2): name and whether the server closes after it. */
export const ErrorCodes: Record<number, { name: string; fatal: boolean }> = {
  1: { name: "PROTOCOL_ERROR", fatal: true },
  2: { name: "UNKNOWN_TYPE", fatal: true },
  3: { name: "FRAME_TOO_LARGE", fatal: true },
  4: { name: "UNSUPPORTED_VERSION", fatal: true },
  5: { name: "HELLO_REQUIRED", fatal: true },
  6: { name: "INVALID_CHANNEL", fatal: false },
  7: { name: "PAYLOAD_TOO_LARGE", fatal: false },
  8: { name: "TOO_MANY_SUBSCRIPTIONS", fatal: false },
  9: { name: "SUBSCRIPTION_EXISTS", fatal: false },
  10: { name: "UNKNOWN_SUBSCRIPTION", fatal: false },
  11: { name: "TOO_MANY_CONNECTIONS", fatal: true },
  12: { name: "UNAUTHENTICATED", fatal: true },
  13: { name: "FORBIDDEN", fatal: false },
  14: { name: "SLOW_CONSUMER", fatal: true },
  15: { name: "SHUTTING_DOWN", fatal: true },
  16: { name: "UNAVAILABLE", fatal: false },
  17: { name: "RATE_LIMITED", fatal: false },
  18: { name: "INVALID_START", fatal: false },
  19: { name: "HANDSHAKE_TIMEOUT", fatal: true },
  20: { name: "IDLE_TIMEOUT", fatal: true },
  21: { name: "INTERNAL", fatal: false },
  22: { name: "INVALID_HEADERS", fatal: false },
  23: { name: "OUTCOME_UNKNOWN", fatal: false },
  24: { name: "TOKEN_EXPIRED", fatal: true },
  25: { name: "INVALID_FILTER", fatal: false },
};
export const CODE_UNKNOWN_SUBSCRIPTION = 10;
export const CODE_UNAUTHENTICATED = 12;
export const CODE_FORBIDDEN = 13;
/** A PUBLISH may or may not have been stored (its host failed with it in flight). */
export const CODE_OUTCOME_UNKNOWN = 23;
/** The token expired and no REFRESH replaced it in time (PROTOCOL.md 2.16). */
export const CODE_TOKEN_EXPIRED = 24;

/** The protocol name of an error code, or "Code(N)" for an unknown one. */
export function codeName(code: number): string {
  return ErrorCodes[code]?.name ?? `Code(${code})`;
}

/** Whether the server closes the connection after an ERROR with code. */
export function codeFatal(code: number): boolean {
  return ErrorCodes[code]?.fatal ?? false;
}

/** Input that breaks the protocol: the connection cannot be trusted further. */
export class MalformedFrameError extends Error {
  constructor(message: string) {
    super(`sluice: malformed frame: ${message}`);
    this.name = "MalformedFrameError";
  }
}

/** Headers or a message id that break the rules of PROTOCOL.md 2.14. */
export class InvalidHeadersError extends Error {
  constructor(message: string) {
    super(`sluice: invalid message headers: ${message}`);
    this.name = "InvalidHeadersError";
  }
}

/** A channel name that breaks the rules of PROTOCOL.md 4. */
export class InvalidChannelError extends Error {
  constructor(message: string) {
    super(`sluice: invalid channel name: ${message}`);
    this.name = "InvalidChannelError";
  }
}

// ---------------------------------------------------------------------------
// Values

export interface Header {
  len: number;
  type: number;
  flags: number;
  id: number;
}

export interface Hello {
  minVersion: number;
  maxVersion: number;
  features: number;
  name: string;
  token: Uint8Array;
}

export interface Welcome {
  version: number;
  features: number;
  maxPayload: number;
  maxBody: number;
  maxSubs: number;
  limitMsgs: number;
  limitSize: number;
  limitLifeMs: number;
  ttlMs: number;
  pingIntervalMs: number;
  serverName: string;
  nodes: string[];
  /**
   * The server's dedup window of message ids, milliseconds, and the most
   * ids it keeps per channel (PROTOCOL.md 2.2, 2.14): sent only when
   * FEATURE_HEADERS was accepted; absent when the server does not announce
   * them.
   */
  dedupWindowMs?: number;
  dedupIDs?: number;
}

export interface Ack {
  id: number;
  position: number;
}

export interface Subscribe {
  subID: number;
  start: number;
  arg: number;
  epoch: number;
  channel: string;
}

export interface Subscribed {
  subID: number;
  first: number;
  earliest: number;
  next: number;
  epoch: number;
}

export interface Gap {
  from: number;
  to: number;
  reason: number;
}

export interface ErrorFrame {
  code: number;
  retriable: boolean;
  text: string;
}

export interface GoAway {
  code: number;
  text: string;
}

/** One header entry of a message; keys may repeat and keep their order. */
export interface HeaderField {
  key: string;
  value: string;
}

/** A message id and headers (either may be absent). */
export interface Ext {
  msgId?: Uint8Array | null;
  headers?: HeaderField[] | null;
}

/** A record of a DATA frame: its payload and, for an extended record, id and headers. */
export interface DataRecord {
  payload: Uint8Array;
  msgId: Uint8Array | null;
  headers: HeaderField[];
}

export interface Data {
  first: number;
  /** The records, at positions first, first+1, ...; payloads are views into the frame. */
  records: DataRecord[];
}

/** The headers of a record without any (shared, frozen). */
export const NO_HEADERS: HeaderField[] = Object.freeze([]) as unknown as HeaderField[];
const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: false });
const strictDec = new TextDecoder("utf-8", { fatal: true });

export function utf8(s: string): Uint8Array {
  return enc.encode(s);
}

// ---------------------------------------------------------------------------
// Encoding

/** A growable big-endian writer for one frame. @internal */
export class Writer {
  buf: Uint8Array;
  view: DataView;
  off = 0;
  constructor(size: number) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
  }
  u8(v: number) {
    this.view.setUint8(this.off, v);
    this.off += 1;
  }
  u16(v: number) {
    this.view.setUint16(this.off, v);
    this.off += 2;
  }
  u32(v: number) {
    this.view.setUint32(this.off, v >>> 0);
    this.off += 4;
  }
  /** A position, epoch or start argument: a safe non-negative integer (checkU64). */
  u64(v: number) {
    checkU64(v, "u64");
    this.view.setUint32(this.off, Math.floor(v / 0x100000000));
    this.view.setUint32(this.off + 4, v % 0x100000000);
    this.off += 8;
  }
  /** A u64 that is an identifier, not a position (e.g. a presence member's connection). */
  u64big(v: bigint) {
    this.view.setBigUint64(this.off, BigInt.asUintN(64, v));
    this.off += 8;
  }
  bytes(b: Uint8Array) {
    this.buf.set(b, this.off);
    this.off += b.length;
  }
}

/** @internal Starts a frame: its header, room for bodyLen bytes of body. */
export function frame(type: number, flags: number, id: number, bodyLen: number): Writer {
  if (bodyLen < 0 || bodyLen > 0xffffffff) throw new RangeError(`${typeName(type)} body length ${bodyLen}`);
  const w = new Writer(HEADER_LEN + bodyLen);
  w.u32(bodyLen);
  w.u8(type);
  w.u8(flags);
  w.u32(id);
  return w;
}

/** Returns v if it is a safe non-negative integer (a u64 a number holds exactly); throws RangeError. */
export function checkU64(v: number, field: string): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    throw new RangeError(`${field} ${typeof v === "bigint" ? `${v}n` : String(v)} is not an integer in 0..2^53-1`);
  }
  return v;
}

function mustFit(type: number, field: string, n: number, max: number) {
  if (n > max) throw new RangeError(`${typeName(type)}: ${field} ${n} exceeds ${max}`);
}

export function encodeHello(id: number, h: Hello): Uint8Array {
  const name = utf8(h.name);
  mustFit(FrameType.HELLO, "name length", name.length, MAX_NAME_LEN);
  mustFit(FrameType.HELLO, "token length", h.token.length, 0xffff);
  const w = frame(FrameType.HELLO, 0, id, 2 + 2 + 4 + 1 + name.length + 2 + h.token.length);
  w.u16(h.minVersion);
  w.u16(h.maxVersion);
  w.u32(h.features);
  w.u8(name.length);
  w.bytes(name);
  w.u16(h.token.length);
  w.bytes(h.token);
  return w.buf;
}

export function encodeWelcome(id: number, v: Welcome): Uint8Array {
  const name = utf8(v.serverName);
  mustFit(FrameType.WELCOME, "server name length", name.length, MAX_NAME_LEN);
  const nodes = v.nodes.map(utf8);
  let n = 2 + 4 + 4 + 4 + 2 + 4 * 5 + 1 + name.length + 2;
  for (const node of nodes) {
    mustFit(FrameType.WELCOME, "node address length", node.length, 255);
    n += 1 + node.length;
  }
  const dd = (v.features & FEATURE_HEADERS) !== 0 && ((v.dedupWindowMs ?? 0) > 0 || (v.dedupIDs ?? 0) > 0);
  if (dd) n += 8;
  const w = frame(FrameType.WELCOME, 0, id, n);
  w.u16(v.version);
  w.u32(v.features);
  w.u32(v.maxPayload);
  w.u32(v.maxBody);
  w.u16(v.maxSubs);
  w.u32(v.limitMsgs);
  w.u32(v.limitSize);
  w.u32(v.limitLifeMs);
  w.u32(v.ttlMs);
  w.u32(v.pingIntervalMs);
  w.u8(name.length);
  w.bytes(name);
  w.u16(nodes.length);
  for (const node of nodes) {
    w.u8(node.length);
    w.bytes(node);
  }
  if (dd) {
    w.u32(v.dedupWindowMs ?? 0);
    w.u32(v.dedupIDs ?? 0);
  }
  return w.buf;
}

/**
 * A PUBLISH frame; flags FLAG_ACK asks for a PUBACK for id. With a message
 * id or headers (only after FEATURE_HEADERS was negotiated) the body after
 * the channel is an extended record body and FLAG_EXT is set; check them
 * with checkExt first.
 */
export function encodePublish(
  id: number,
  flags: number,
  channel: string | Uint8Array,
  payload: Uint8Array,
  ext?: Ext,
): Uint8Array {
  const ch = typeof channel === "string" ? utf8(channel) : channel;
  mustFit(FrameType.PUBLISH, "channel length", ch.length, MAX_CHANNEL_LEN);
  const extended = hasExt(ext);
  const hs = extended ? encodeHeaderFields(ext!.headers ?? []) : null;
  const body = extended ? extLen(ext!.msgId ?? null, hs!, payload.length) : payload.length;
  const w = frame(FrameType.PUBLISH, extended ? flags | FLAG_EXT : flags, id, 1 + ch.length + body);
  w.u8(ch.length);
  w.bytes(ch);
  if (extended) writeExt(w, ext!.msgId ?? null, hs!);
  w.bytes(payload);
  return w.buf;
}

/** Whether ext carries a message id or headers. */
export function hasExt(ext: Ext | undefined | null): boolean {
  return !!ext && ((ext.msgId?.length ?? 0) > 0 || (ext.headers?.length ?? 0) > 0);
}

type EncodedField = [Uint8Array, Uint8Array];

function encodeHeaderFields(hs: HeaderField[]): EncodedField[] {
  return hs.map((h) => [utf8(h.key), utf8(h.value)]);
}

function headersLen(hs: EncodedField[]): number {
  let n = 0;
  for (const [k, v] of hs) n += 1 + k.length + 2 + v.length;
  return n;
}

function extLen(msgId: Uint8Array | null, hs: EncodedField[], payloadLen: number): number {
  let n = 1 + payloadLen;
  if (msgId && msgId.length > 0) n += 1 + msgId.length;
  if (hs.length > 0) n += 2 + headersLen(hs);
  return n;
}

function writeExt(w: Writer, msgId: Uint8Array | null, hs: EncodedField[]) {
  const hasID = !!msgId && msgId.length > 0;
  w.u8((hasID ? EXT_MSGID : 0) | (hs.length > 0 ? EXT_HEADERS : 0));
  if (hasID) {
    mustFit(FrameType.PUBLISH, "message id length", msgId!.length, MAX_MSGID_LEN);
    w.u8(msgId!.length);
    w.bytes(msgId!);
  }
  if (hs.length > 0) {
    w.u16(headersLen(hs));
    for (const [k, v] of hs) {
      mustFit(FrameType.PUBLISH, "header key length", k.length, MAX_HEADER_KEY_LEN);
      mustFit(FrameType.PUBLISH, "header value length", v.length, 0xffff);
      w.u8(k.length);
      w.bytes(k);
      w.u16(v.length);
      w.bytes(v);
    }
  }
}

/** An extended record body (without its length word): ext flags, id, headers, payload. */
export function encodeExt(ext: Ext, payload: Uint8Array): Uint8Array {
  if (!hasExt(ext)) throw new RangeError("encodeExt without a message id or headers");
  const hs = encodeHeaderFields(ext.headers ?? []);
  const w = new Writer(extLen(ext.msgId ?? null, hs, payload.length));
  writeExt(w, ext.msgId ?? null, hs);
  w.bytes(payload);
  return w.buf;
}

const tokenByte = (c: number) =>
  (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || "!#$%&'*+-.^_`|~".includes(String.fromCharCode(c));

/**
 * Checks a message id (1..255 bytes) and headers (at most 64; keys of
 * 1..255 HTTP token characters; values of UTF-8 without control characters
 * other than tab; a block of at most 8192 bytes) as the server does, and
 * throws InvalidHeadersError.
 */
export function checkExt(ext: Ext) {
  if (ext.msgId && (ext.msgId.length === 0 || ext.msgId.length > MAX_MSGID_LEN)) {
    throw new InvalidHeadersError(`message id length ${ext.msgId.length} outside 1..${MAX_MSGID_LEN}`);
  }
  const hs = ext.headers ?? [];
  if (hs.length > MAX_HEADERS) throw new InvalidHeadersError(`${hs.length} headers, at most ${MAX_HEADERS}`);
  const enc = encodeHeaderFields(hs);
  const n = headersLen(enc);
  if (n > MAX_HEADERS_LEN) throw new InvalidHeadersError(`header block of ${n} bytes, at most ${MAX_HEADERS_LEN}`);
  enc.forEach(([k, v], i) => {
    const key = hs[i].key;
    if (k.length === 0 || k.length > MAX_HEADER_KEY_LEN) {
      throw new InvalidHeadersError(`key length ${k.length} outside 1..${MAX_HEADER_KEY_LEN}`);
    }
    k.forEach((c, j) => {
      if (!tokenByte(c)) throw new InvalidHeadersError(`key ${JSON.stringify(key)}: byte 0x${c.toString(16)} at ${j} is not a token character`);
    });
    if (hasLoneSurrogate(hs[i].value)) throw new InvalidHeadersError(`header ${JSON.stringify(key)}: value is not valid UTF-8`);
    v.forEach((c, j) => {
      if ((c < 0x20 && c !== 0x09) || c === 0x7f) {
        throw new InvalidHeadersError(`header ${JSON.stringify(key)}: value has control character 0x${c.toString(16)} at ${j}`);
      }
    });
  });
}

/**
 * Decodes an extended record body, checking its layout: the ext flags (at
 * least one of MSGID, HEADERS; no other bit), the id (1..255 bytes) and
 * header block (1..8192 bytes of at most 64 whole entries with non-empty
 * keys). The payload is a view into body.
 */
export function decodeExt(body: Uint8Array, frameName = "DATA"): DataRecord {
  const d = new Reader(body, frameName);
  const f = d.u8("ext flags");
  if (d.err === null && f === 0) d.fail("extended record without a message id or headers");
  if (d.err === null && (f & ~(EXT_MSGID | EXT_HEADERS)) !== 0) d.fail(`ext flags 0x${f.toString(16).padStart(2, "0")}: undefined bits`);
  let msgId: Uint8Array | null = null;
  const headers: HeaderField[] = [];
  if (d.err === null && (f & EXT_MSGID) !== 0) {
    const n = d.u8("message id length");
    if (d.err === null && n === 0) d.fail("empty message id");
    msgId = d.bytes(n, "message id");
  }
  if (d.err === null && (f & EXT_HEADERS) !== 0) {
    const n = d.u16("headers length");
    if (d.err === null && (n === 0 || n > MAX_HEADERS_LEN)) d.fail(`headers length ${n} outside 1..${MAX_HEADERS_LEN}`);
    const block = d.bytes(n, "header block");
    if (d.err === null) {
      const hv = new DataView(block.buffer, block.byteOffset, block.byteLength);
      for (let off = 0, i = 0; off < block.length; i++) {
        if (i === MAX_HEADERS) throw new MalformedFrameError(`${frameName}: more than ${MAX_HEADERS} headers`);
        const k = block[off];
        if (block.length - off < 1 + k + 2) throw new MalformedFrameError(`${frameName}: header ${i} overruns the header block`);
        const v = hv.getUint16(off + 1 + k);
        if (block.length - off < 1 + k + 2 + v) throw new MalformedFrameError(`${frameName}: header ${i} overruns the header block`);
        if (k === 0) throw new MalformedFrameError(`${frameName}: header ${i} has an empty key`);
        headers.push({
          key: dec.decode(block.subarray(off + 1, off + 1 + k)),
          value: dec.decode(block.subarray(off + 3 + k, off + 3 + k + v)),
        });
        off += 3 + k + v;
      }
    }
  }
  const payload = d.rest();
  d.check();
  return { payload, msgId, headers };
}

export function encodePubAck(acks: Ack[]): Uint8Array {
  mustFit(FrameType.PUBACK, "ack count", acks.length, 0xffff);
  const w = frame(FrameType.PUBACK, 0, 0, 2 + 12 * acks.length);
  w.u16(acks.length);
  for (const a of acks) {
    w.u32(a.id);
    w.u64(checkU64(a.position, "position"));
  }
  return w.buf;
}

export function encodeSubscribe(id: number, s: Subscribe): Uint8Array {
  const ch = utf8(s.channel);
  mustFit(FrameType.SUBSCRIBE, "channel length", ch.length, MAX_CHANNEL_LEN);
  const w = frame(FrameType.SUBSCRIBE, 0, id, 22 + ch.length);
  w.u32(s.subID);
  w.u8(s.start);
  w.u64(checkU64(s.arg, "startArg"));
  w.u64(checkU64(s.epoch, "epoch"));
  w.u8(ch.length);
  w.bytes(ch);
  return w.buf;
}

export function encodeSubscribed(id: number, s: Subscribed): Uint8Array {
  const w = frame(FrameType.SUBSCRIBED, 0, id, 36);
  w.u32(s.subID);
  w.u64(checkU64(s.first, "first"));
  w.u64(checkU64(s.earliest, "earliest"));
  w.u64(checkU64(s.next, "next"));
  w.u64(checkU64(s.epoch, "epoch"));
  return w.buf;
}

export function encodeUnsubscribe(id: number, subID: number): Uint8Array {
  const w = frame(FrameType.UNSUBSCRIBE, 0, id, 4);
  w.u32(subID);
  return w.buf;
}

export function encodeUnsubscribed(id: number, subID: number): Uint8Array {
  const w = frame(FrameType.UNSUBSCRIBED, 0, id, 4);
  w.u32(subID);
  return w.buf;
}

/**
 * A DATA frame of records at positions first, first+1, ...: plain payloads,
 * or records with a message id or headers, which become extended records.
 */
export function encodeData(subID: number, first: number, records: Array<Uint8Array | (Ext & { payload: Uint8Array })>): Uint8Array {
  const bodies = records.map((r) =>
    r instanceof Uint8Array ? { ext: false, b: r } : hasExt(r) ? { ext: true, b: encodeExt(r, r.payload) } : { ext: false, b: r.payload },
  );
  let n = DATA_PREFIX_LEN;
  for (const r of bodies) n += 4 + r.b.length;
  const w = frame(FrameType.DATA, 0, subID, n);
  w.u64(checkU64(first, "first"));
  w.u32(bodies.length);
  for (const r of bodies) {
    if (r.b.length > 0x7fffffff) throw new RangeError(`DATA record of ${r.b.length} bytes`);
    w.u32(r.ext ? (RECORD_EXT | r.b.length) >>> 0 : r.b.length);
    w.bytes(r.b);
  }
  return w.buf;
}

export function encodeGap(subID: number, g: Gap): Uint8Array {
  const w = frame(FrameType.GAP, 0, subID, 17);
  w.u64(checkU64(g.from, "from"));
  w.u64(checkU64(g.to, "to"));
  w.u8(g.reason);
  return w.buf;
}

export function encodePing(id: number): Uint8Array {
  return frame(FrameType.PING, 0, id, 0).buf;
}

export function encodePong(id: number): Uint8Array {
  return frame(FrameType.PONG, 0, id, 0).buf;
}

function encodeCodeText(type: number, flags: number, id: number, code: number, text: string): Uint8Array {
  const t = utf8(text);
  mustFit(type, "text length", t.length, 0xffff);
  const w = frame(type, flags, id, 4 + t.length);
  w.u16(code);
  w.u16(t.length);
  w.bytes(t);
  return w.buf;
}

export function encodeError(id: number, e: ErrorFrame): Uint8Array {
  return encodeCodeText(FrameType.ERROR, e.retriable ? FLAG_RETRIABLE : 0, id, e.code, e.text);
}

export function encodeGoAway(g: GoAway): Uint8Array {
  return encodeCodeText(FrameType.GOAWAY, 0, 0, g.code, g.text);
}

// ---------------------------------------------------------------------------
// Decoding

/**
 * A sticky-error reader over one body: after the first shortfall every read
 * returns 0 and `err` says which field at which offset ran out.
 */
/** @internal */
export class Reader {
  off = 0;
  err: string | null = null;
  readonly view: DataView;
  constructor(
    readonly b: Uint8Array,
    readonly frameName: string,
  ) {
    this.view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }
  need(n: number, field: string): boolean {
    if (this.err !== null) return false;
    if (n > this.b.length - this.off) {
      this.err = `${this.frameName}: ${field} at offset ${this.off} needs ${n} bytes, body has ${this.b.length}`;
      return false;
    }
    return true;
  }
  fail(msg: string) {
    if (this.err === null) this.err = `${this.frameName}: ${msg}`;
  }
  u8(field: string): number {
    if (!this.need(1, field)) return 0;
    return this.view.getUint8(this.off++);
  }
  u16(field: string): number {
    if (!this.need(2, field)) return 0;
    const v = this.view.getUint16(this.off);
    this.off += 2;
    return v;
  }
  u32(field: string): number {
    if (!this.need(4, field)) return 0;
    const v = this.view.getUint32(this.off);
    this.off += 4;
    return v;
  }
  /**
   * A position, epoch or start argument: a u64 above 2^53-1 fails (a
   * number would round it), naming the field and its offset.
   */
  u64(field: string): number {
    if (!this.need(8, field)) return 0;
    const hi = this.view.getUint32(this.off);
    const lo = this.view.getUint32(this.off + 4);
    if (hi > 0x1fffff) {
      this.fail(`${field} ${(BigInt(hi) << 32n) | BigInt(lo)} at offset ${this.off} exceeds 2^53-1, the largest this SDK represents exactly`);
      return 0;
    }
    this.off += 8;
    return hi * 0x100000000 + lo;
  }
  /** A u64 that is an identifier, not a position (e.g. a presence member's connection). */
  u64big(field: string): bigint {
    if (!this.need(8, field)) return 0n;
    const v = this.view.getBigUint64(this.off);
    this.off += 8;
    return v;
  }
  bytes(n: number, field: string): Uint8Array {
    if (!this.need(n, field)) return new Uint8Array(0);
    const v = this.b.subarray(this.off, this.off + n);
    this.off += n;
    return v;
  }
  rest(): Uint8Array {
    if (this.err !== null) return new Uint8Array(0);
    const v = this.b.subarray(this.off);
    this.off = this.b.length;
    return v;
  }
  /** Fails if bytes are left after the last field (exact-length frames). */
  exact() {
    if (this.err === null && this.off !== this.b.length) {
      this.err = `${this.frameName}: ${this.b.length - this.off} trailing bytes after offset ${this.off} (body has ${this.b.length})`;
    }
  }
  check() {
    if (this.err !== null) throw new MalformedFrameError(this.err);
  }
}

/** A decoded frame: its header and its body (a view into the message). */
export interface Frame {
  header: Header;
  body: Uint8Array;
}

/**
 * Splits one WebSocket message into header and body. The declared length is
 * checked against maxBody first, then against the bytes present: a message
 * must hold exactly one whole frame.
 */
export function decodeFrame(msg: Uint8Array, maxBody: number): Frame {
  if (msg.length < HEADER_LEN) {
    throw new MalformedFrameError(`message of ${msg.length} bytes is shorter than a frame header`);
  }
  const v = new DataView(msg.buffer, msg.byteOffset, msg.byteLength);
  const header: Header = { len: v.getUint32(0), type: v.getUint8(4), flags: v.getUint8(5), id: v.getUint32(6) };
  if (header.len > maxBody) {
    throw new MalformedFrameError(
      `${typeName(header.type)}: declared body length ${header.len} exceeds the limit ${maxBody}`,
    );
  }
  if (msg.length - HEADER_LEN !== header.len) {
    throw new MalformedFrameError(
      `${typeName(header.type)}: declared body length ${header.len}, the message carries ${msg.length - HEADER_LEN}`,
    );
  }
  return { header, body: msg.subarray(HEADER_LEN) };
}

export function decodeHello(body: Uint8Array): Hello {
  const d = new Reader(body, "HELLO");
  const minVersion = d.u16("minVersion");
  const maxVersion = d.u16("maxVersion");
  const features = d.u32("features");
  const name = dec.decode(d.bytes(d.u8("nameLen"), "name"));
  // A token over MAX_TOKEN_LEN is well-formed: a server refuses it as
  // credentials (UNAUTHENTICATED).
  const token = d.bytes(d.u16("tokenLen"), "token");
  d.check();
  return { minVersion, maxVersion, features, name, token };
}

export function decodeWelcome(body: Uint8Array): Welcome {
  const d = new Reader(body, "WELCOME");
  const w: Welcome = {
    version: d.u16("version"),
    features: d.u32("features"),
    maxPayload: d.u32("maxPayload"),
    maxBody: d.u32("maxBody"),
    maxSubs: d.u16("maxSubs"),
    limitMsgs: d.u32("limitMsgs"),
    limitSize: d.u32("limitSize"),
    limitLifeMs: d.u32("limitLifeMs"),
    ttlMs: d.u32("ttlMs"),
    pingIntervalMs: d.u32("pingIntervalMs"),
    serverName: "",
    nodes: [],
  };
  w.serverName = dec.decode(d.bytes(d.u8("serverNameLen"), "serverName"));
  const count = d.u16("nodeCount");
  // Every node takes at least its length byte: refuse a count the body
  // cannot hold before making room for it.
  if (d.need(count, "node list")) {
    for (let i = 0; i < count && d.err === null; i++) {
      w.nodes.push(dec.decode(d.bytes(d.u8("node address length"), "node address")));
    }
  }
  // With FEATURE_HEADERS the dedup fields follow, when all 8 bytes are
  // there; other trailing bytes are ignored.
  if (d.err === null && (w.features & FEATURE_HEADERS) !== 0 && d.b.length - d.off >= 8) {
    w.dedupWindowMs = d.u32("dedupWindowMs");
    w.dedupIDs = d.u32("dedupIDs");
  }
  d.check();
  return w;
}

export interface Publish {
  channel: Uint8Array;
  payload: Uint8Array;
  /** With FLAG_EXT: the message id and headers. */
  msgId?: Uint8Array | null;
  headers?: HeaderField[];
}

/** Decodes a PUBLISH body; with FLAG_EXT in flags, its extended record body too. */
export function decodePublish(body: Uint8Array, flags = 0): Publish {
  const d = new Reader(body, "PUBLISH");
  const cl = d.u8("channelLen");
  if (d.err === null && cl === 0) d.fail("empty channel");
  if (d.err === null && cl > body.length - 1) d.fail(`channel length ${cl} exceeds body (${body.length} bytes)`);
  const channel = d.bytes(cl, "channel");
  const payload = d.rest();
  d.check();
  if ((flags & FLAG_EXT) !== 0) {
    const e = decodeExt(payload, "PUBLISH");
    return { channel, payload: e.payload, msgId: e.msgId, headers: e.headers };
  }
  return { channel, payload };
}

export function decodePubAck(body: Uint8Array): Ack[] {
  const d = new Reader(body, "PUBACK");
  const count = d.u16("count");
  if (d.err === null && count === 0) d.fail("ack count 0");
  if (d.err === null && body.length !== 2 + 12 * count) {
    d.fail(`body length ${body.length}, want ${2 + 12 * count} for ${count} acks`);
  }
  d.check();
  const acks: Ack[] = new Array(count);
  for (let i = 0; i < count; i++) {
    const id = d.u32("request id");
    acks[i] = { id, position: d.u64("position") };
  }
  d.check(); // a position beyond 2^53-1
  return acks;
}

export function decodeSubscribe(body: Uint8Array): Subscribe {
  const d = new Reader(body, "SUBSCRIBE");
  const subID = d.u32("subID");
  const start = d.u8("startKind");
  if (d.err === null && start > StartKind.SINCE) d.fail(`start kind ${start} undefined`);
  const arg = d.u64("startArg");
  const epoch = d.u64("epoch");
  const cl = d.u8("channelLen");
  if (d.err === null && cl === 0) d.fail("empty channel");
  const channel = dec.decode(d.bytes(cl, "channel"));
  d.exact();
  d.check();
  return { subID, start, arg, epoch, channel };
}

export function decodeSubscribed(body: Uint8Array): Subscribed {
  const d = new Reader(body, "SUBSCRIBED");
  const s: Subscribed = {
    subID: d.u32("subID"),
    first: d.u64("first"),
    earliest: d.u64("earliest"),
    next: d.u64("next"),
    epoch: d.u64("epoch"),
  };
  d.check(); // trailing bytes are room for v1.x fields
  return s;
}

function decodeSubID(name: string, body: Uint8Array): number {
  const d = new Reader(body, name);
  const v = d.u32("subID");
  d.exact();
  d.check();
  return v;
}

export function decodeUnsubscribe(body: Uint8Array): number {
  return decodeSubID("UNSUBSCRIBE", body);
}

export function decodeUnsubscribed(body: Uint8Array): number {
  return decodeSubID("UNSUBSCRIBED", body);
}

/**
 * Decodes a DATA body: a count of 0, a record overrunning the body, bytes
 * after the last record, or positions past 2^53-1 (MAX_U64_NUMBER) are
 * malformed.
 * The count is checked against the bytes present (4 per record at least)
 * before any room is made for the records.
 */
export function decodeData(body: Uint8Array): Data {
  const d = new Reader(body, "DATA");
  const first = d.u64("first");
  const count = d.u32("count");
  const records = d.rest();
  if (d.err === null) {
    if (count === 0) d.fail("record count 0");
    else if (count > Math.floor(records.length / 4)) {
      d.fail(`record count ${count} cannot fit in ${records.length} bytes of records`);
    } else if (first > MAX_U64_NUMBER - (count - 1)) d.fail(`positions ${first}+${count} overflow 2^53-1`);
  }
  d.check();
  const rv = new DataView(records.buffer, records.byteOffset, records.byteLength);
  const out: DataRecord[] = new Array(count);
  let off = 0;
  for (let i = 0; i < count; i++) {
    if (records.length - off < 4) {
      throw new MalformedFrameError(
        `DATA: record ${i} of ${count}: length field at offset ${DATA_PREFIX_LEN + off} overruns the body (${body.length} bytes)`,
      );
    }
    const word = rv.getUint32(off);
    const n = (word & ~RECORD_EXT) >>> 0;
    off += 4;
    if (n > records.length - off) {
      throw new MalformedFrameError(
        `DATA: record ${i} of ${count}: length ${n} at offset ${DATA_PREFIX_LEN + off - 4} overruns the body (${body.length} bytes)`,
      );
    }
    const rb = records.subarray(off, off + n);
    out[i] = (word & RECORD_EXT) !== 0 ? decodeExt(rb, "DATA") : { payload: rb, msgId: null, headers: NO_HEADERS };
    off += n;
  }
  if (off !== records.length) {
    throw new MalformedFrameError(`DATA: ${records.length - off} trailing bytes after ${count} records`);
  }
  return { first, records: out };
}

export function decodeGap(body: Uint8Array): Gap {
  const d = new Reader(body, "GAP");
  const from = d.u64("from");
  const to = d.u64("to");
  const reason = d.u8("reason");
  if (d.err === null && from > to) d.fail(`range from ${from} > to ${to}`);
  if (d.err === null && (reason < GapReason.EXPIRED || reason > GapReason.LOST)) d.fail(`reason ${reason} undefined`);
  d.exact();
  d.check();
  return { from, to, reason };
}

export function decodePing(body: Uint8Array): void {
  const d = new Reader(body, "PING");
  d.exact();
  d.check();
}

export function decodePong(body: Uint8Array): void {
  const d = new Reader(body, "PONG");
  d.exact();
  d.check();
}

function decodeCodeText(name: string, body: Uint8Array): { code: number; text: string } {
  const d = new Reader(body, name);
  const code = d.u16("code");
  const text = dec.decode(d.bytes(d.u16("textLen"), "text"));
  d.exact();
  d.check();
  return { code, text };
}

/** Decodes an ERROR; retriable comes from the header's flags. */
export function decodeError(h: Header, body: Uint8Array): ErrorFrame {
  const { code, text } = decodeCodeText("ERROR", body);
  return { code, retriable: (h.flags & FLAG_RETRIABLE) !== 0, text };
}

export function decodeGoAway(body: Uint8Array): GoAway {
  return decodeCodeText("GOAWAY", body);
}

// ---------------------------------------------------------------------------
// Channel names (PROTOCOL.md 4)

/**
 * Checks a channel name: 1..255 bytes of valid UTF-8 with no white space
 * (Unicode's White_Space, as Go's unicode.IsSpace) and no control character.
 * Returns the name's UTF-8 bytes; throws InvalidChannelError.
 */
export function validChannel(name: string | Uint8Array): Uint8Array {
  const b = typeof name === "string" ? utf8(name) : name;
  if (b.length === 0) throw new InvalidChannelError("empty");
  if (b.length > MAX_CHANNEL_LEN) throw new InvalidChannelError(`${b.length} bytes, more than ${MAX_CHANNEL_LEN}`);
  let s: string;
  try {
    s = typeof name === "string" ? name : strictDec.decode(b);
  } catch {
    throw new InvalidChannelError("invalid UTF-8");
  }
  if (typeof name === "string" && hasLoneSurrogate(name)) {
    // TextEncoder would have sent U+FFFD in its place.
    throw new InvalidChannelError("invalid UTF-8 (a lone surrogate)");
  }
  let off = 0;
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if (isSpace(cp) || isControl(cp)) {
      throw new InvalidChannelError(
        `U+${cp.toString(16).toUpperCase().padStart(4, "0")} at offset ${off} is white space or a control character`,
      );
    }
    off += utf8Len(cp);
  }
  return b;
}

function hasLoneSurrogate(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (!(d >= 0xdc00 && d <= 0xdfff)) return true;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) return true;
  }
  return false;
}

function utf8Len(cp: number): number {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}

// Go's unicode.IsSpace: '\t', '\n', '\v', '\f', '\r', ' ', U+0085, U+00A0,
// and the White_Space characters above Latin-1.
function isSpace(cp: number): boolean {
  if (cp <= 0xff) return cp === 0x20 || (cp >= 0x09 && cp <= 0x0d) || cp === 0x85 || cp === 0xa0;
  return (
    cp === 0x1680 ||
    (cp >= 0x2000 && cp <= 0x200a) ||
    cp === 0x2028 ||
    cp === 0x2029 ||
    cp === 0x202f ||
    cp === 0x205f ||
    cp === 0x3000
  );
}

// Go's unicode.IsControl: C0 and C1 controls.
function isControl(cp: number): boolean {
  return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}
