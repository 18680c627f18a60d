// Codecs of the frames of FeatureRefresh (REFRESH, AUTHED; PROTOCOL.md
// 2.16) and FeatureFilters (SUBSCRIBE with FILTER, FDATA; 2.17), in the
// style of codec.ts: exact lengths, every length checked before use.

import {
  decodeExt,
  decodeSubscribe,
  encodeSubscribe,
  FLAG_FILTER,
  FrameType,
  frame,
  MalformedFrameError,
  NO_HEADERS,
  Reader,
  RECORD_EXT,
  utf8,
  type DataRecord,
  type Subscribe,
} from "./codec.js";

/** The longest filter expression a server compiles. */
export const MAX_FILTER_LEN = 1024;

/** A REFRESH frame carrying token (1..65535 bytes). */
export function encodeRefresh(id: number, token: Uint8Array): Uint8Array {
  if (token.length < 1 || token.length > 0xffff) throw new RangeError(`REFRESH: token length ${token.length}`);
  const w = frame(FrameType.REFRESH, 0, id, 2 + token.length);
  w.u16(token.length);
  w.bytes(token);
  return w.buf;
}

export function decodeRefresh(body: Uint8Array): Uint8Array {
  const d = new Reader(body, "REFRESH");
  const n = d.u16("tokenLen");
  if (d.err === null && n === 0) d.fail("empty token");
  const token = d.bytes(n, "token");
  d.exact();
  d.check();
  return token;
}

/** AUTHED: the credentials' remaining life and grace, and the client id. */
export interface Authed {
  /** Milliseconds the credentials stay valid; 0 = they do not expire. */
  expiresInMs: number;
  graceMs: number;
  clientId: string;
}

export function encodeAuthed(id: number, a: Authed): Uint8Array {
  const cid = utf8(a.clientId);
  if (cid.length > 255) throw new RangeError(`AUTHED: client id of ${cid.length} bytes`);
  const w = frame(FrameType.AUTHED, 0, id, 9 + cid.length);
  w.u32(a.expiresInMs);
  w.u32(a.graceMs);
  w.u8(cid.length);
  w.bytes(cid);
  return w.buf;
}

const dec = new TextDecoder("utf-8", { fatal: false });

export function decodeAuthed(body: Uint8Array): Authed {
  const d = new Reader(body, "AUTHED");
  const expiresInMs = d.u32("expiresInMs");
  const graceMs = d.u32("graceMs");
  const clientId = dec.decode(d.bytes(d.u8("clientIDLen"), "clientID"));
  d.exact();
  d.check();
  return { expiresInMs, graceMs, clientId };
}

/** A SUBSCRIBE with FILTER: s, then the expression. */
export function encodeSubscribeFilter(id: number, s: Subscribe, filter: string): Uint8Array {
  const f = utf8(filter);
  if (f.length < 1 || f.length > 0xffff) throw new RangeError(`SUBSCRIBE: filter of ${f.length} bytes`);
  const plain = encodeSubscribe(id, s);
  const out = new Uint8Array(plain.length + 2 + f.length);
  out.set(plain);
  const v = new DataView(out.buffer);
  v.setUint32(0, plain.length - 10 + 2 + f.length);
  out[5] |= FLAG_FILTER;
  v.setUint16(plain.length, f.length);
  out.set(f, plain.length + 2);
  return out;
}

/** Decodes the body of a SUBSCRIBE with FILTER: the subscription and the expression. */
export function decodeSubscribeFilter(body: Uint8Array): { sub: Subscribe; filter: string } {
  const cl = body.length >= 22 ? body[21] : 0;
  const end = Math.min(body.length, 22 + cl);
  const sub = decodeSubscribe(body.subarray(0, end));
  const d = new Reader(body.subarray(end), "SUBSCRIBE");
  const n = d.u16("filterLen");
  if (d.err === null && n === 0) d.fail("empty filter");
  const filter = dec.decode(d.bytes(n, "filter"));
  d.exact();
  d.check();
  return { sub, filter };
}

/** One FDATA entry: a matching message and its position. */
export interface FRecord extends DataRecord {
  position: number;
}

/**
 * Decodes an FDATA body: a count of at least 1, then entries (position,
 * length word, body) that fill it exactly, positions strictly increasing
 * from 1. Payloads alias body.
 */
export function decodeFData(body: Uint8Array): FRecord[] {
  const d = new Reader(body, "FDATA");
  const count = d.u32("count");
  if (d.err === null) {
    if (count === 0) d.fail("entry count 0");
    else if (count > Math.floor((body.length - 4) / 12)) d.fail(`entry count ${count} cannot fit in ${body.length - 4} bytes`);
  }
  d.check();
  const out: FRecord[] = new Array(count);
  let prev = 0;
  for (let i = 0; i < count; i++) {
    const position = d.u64("position");
    const word = d.u32("length");
    const n = (word & ~RECORD_EXT) >>> 0;
    const rb = d.bytes(n, "record");
    d.check();
    if (position <= prev) throw new MalformedFrameError(`FDATA: entry ${i}: position ${position} after ${prev}`);
    prev = position;
    const r = (word & RECORD_EXT) !== 0 ? decodeExt(rb, "FDATA") : { payload: rb, msgId: null, headers: NO_HEADERS };
    out[i] = { ...r, position };
  }
  d.exact();
  d.check();
  return out;
}

/** An FDATA frame of records (for tests and fake servers). */
export function encodeFData(subID: number, recs: { position: number; body: Uint8Array; ext: boolean }[]): Uint8Array {
  let n = 4;
  for (const r of recs) n += 12 + r.body.length;
  const w = frame(FrameType.FDATA, 0, subID, n);
  w.u32(recs.length);
  for (const r of recs) {
    w.u64(r.position);
    w.u32((r.body.length | (r.ext ? RECORD_EXT : 0)) >>> 0);
    w.bytes(r.body);
  }
  return w.buf;
}
