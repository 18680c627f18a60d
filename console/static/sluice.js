// Built from js/ by 'npm run bundle' (@sluice-rtm/client); do not edit.
var __defProp = Object.defineProperty;
var __export = (target, all) => {
  for (var name in all)
    __defProp(target, name, { get: all[name], enumerable: true });
};

// src/codec.ts
var codec_exports = {};
__export(codec_exports, {
  CODE_FORBIDDEN: () => CODE_FORBIDDEN,
  CODE_OUTCOME_UNKNOWN: () => CODE_OUTCOME_UNKNOWN,
  CODE_TOKEN_EXPIRED: () => CODE_TOKEN_EXPIRED,
  CODE_UNAUTHENTICATED: () => CODE_UNAUTHENTICATED,
  CODE_UNKNOWN_SUBSCRIPTION: () => CODE_UNKNOWN_SUBSCRIPTION,
  DATA_PREFIX_LEN: () => DATA_PREFIX_LEN,
  EXT_HEADERS: () => EXT_HEADERS,
  EXT_MSGID: () => EXT_MSGID,
  ErrorCodes: () => ErrorCodes,
  FEATURE_FILTERS: () => FEATURE_FILTERS,
  FEATURE_HEADERS: () => FEATURE_HEADERS,
  FEATURE_REFRESH: () => FEATURE_REFRESH,
  FEATURE_S2: () => FEATURE_S2,
  FLAG_ACK: () => FLAG_ACK,
  FLAG_COMPRESSED: () => FLAG_COMPRESSED,
  FLAG_EXT: () => FLAG_EXT,
  FLAG_FILTER: () => FLAG_FILTER,
  FLAG_RETRIABLE: () => FLAG_RETRIABLE,
  FrameType: () => FrameType,
  GapReason: () => GapReason,
  HEADER_LEN: () => HEADER_LEN,
  InvalidChannelError: () => InvalidChannelError,
  InvalidHeadersError: () => InvalidHeadersError,
  MAX_CHANNEL_LEN: () => MAX_CHANNEL_LEN,
  MAX_HEADERS: () => MAX_HEADERS,
  MAX_HEADERS_LEN: () => MAX_HEADERS_LEN,
  MAX_HEADER_KEY_LEN: () => MAX_HEADER_KEY_LEN,
  MAX_MSGID_LEN: () => MAX_MSGID_LEN,
  MAX_NAME_LEN: () => MAX_NAME_LEN,
  MAX_TOKEN_LEN: () => MAX_TOKEN_LEN,
  MAX_U64_NUMBER: () => MAX_U64_NUMBER,
  MIN_MAX_BODY: () => MIN_MAX_BODY,
  MalformedFrameError: () => MalformedFrameError,
  NO_HEADERS: () => NO_HEADERS,
  RECORD_EXT: () => RECORD_EXT,
  Reader: () => Reader,
  StartKind: () => StartKind,
  VERSION_1: () => VERSION_1,
  Writer: () => Writer,
  checkExt: () => checkExt,
  checkU64: () => checkU64,
  codeFatal: () => codeFatal,
  codeName: () => codeName,
  decodeData: () => decodeData,
  decodeError: () => decodeError,
  decodeExt: () => decodeExt,
  decodeFrame: () => decodeFrame,
  decodeGap: () => decodeGap,
  decodeGoAway: () => decodeGoAway,
  decodeHello: () => decodeHello,
  decodePing: () => decodePing,
  decodePong: () => decodePong,
  decodePubAck: () => decodePubAck,
  decodePublish: () => decodePublish,
  decodeSubscribe: () => decodeSubscribe,
  decodeSubscribed: () => decodeSubscribed,
  decodeUnsubscribe: () => decodeUnsubscribe,
  decodeUnsubscribed: () => decodeUnsubscribed,
  decodeWelcome: () => decodeWelcome,
  encodeData: () => encodeData,
  encodeError: () => encodeError,
  encodeExt: () => encodeExt,
  encodeGap: () => encodeGap,
  encodeGoAway: () => encodeGoAway,
  encodeHello: () => encodeHello,
  encodePing: () => encodePing,
  encodePong: () => encodePong,
  encodePubAck: () => encodePubAck,
  encodePublish: () => encodePublish,
  encodeSubscribe: () => encodeSubscribe,
  encodeSubscribed: () => encodeSubscribed,
  encodeUnsubscribe: () => encodeUnsubscribe,
  encodeUnsubscribed: () => encodeUnsubscribed,
  encodeWelcome: () => encodeWelcome,
  frame: () => frame,
  gapReasonName: () => gapReasonName,
  hasExt: () => hasExt,
  typeName: () => typeName,
  utf8: () => utf8,
  validChannel: () => validChannel
});
var HEADER_LEN = 10;
var VERSION_1 = 1;
var MAX_CHANNEL_LEN = 255;
var MAX_TOKEN_LEN = 4096;
var MAX_NAME_LEN = 255;
var MIN_MAX_BODY = 8192;
var DATA_PREFIX_LEN = 12;
var MAX_U64_NUMBER = Number.MAX_SAFE_INTEGER;
var FrameType = {
  HELLO: 1,
  WELCOME: 2,
  PUBLISH: 3,
  PUBACK: 4,
  SUBSCRIBE: 5,
  SUBSCRIBED: 6,
  UNSUBSCRIBE: 7,
  DATA: 8,
  GAP: 9,
  PING: 10,
  PONG: 11,
  ERROR: 12,
  GOAWAY: 13,
  UNSUBSCRIBED: 14,
  REFRESH: 15,
  AUTHED: 16,
  FDATA: 17
};
var typeNames = Object.fromEntries(
  Object.entries(FrameType).map(([k, v]) => [v, k])
);
function typeName(t) {
  return typeNames[t] ?? `Type(0x${t.toString(16).padStart(2, "0").toUpperCase()})`;
}
var FLAG_ACK = 1;
var FLAG_EXT = 2;
var FLAG_RETRIABLE = 1;
var FLAG_COMPRESSED = 128;
var FLAG_FILTER = 1;
var FEATURE_S2 = 1 << 0;
var FEATURE_HEADERS = 1 << 1;
var FEATURE_REFRESH = 1 << 2;
var FEATURE_FILTERS = 1 << 3;
var RECORD_EXT = 2147483648;
var EXT_MSGID = 1;
var EXT_HEADERS = 2;
var MAX_MSGID_LEN = 255;
var MAX_HEADERS = 64;
var MAX_HEADERS_LEN = 8192;
var MAX_HEADER_KEY_LEN = 255;
var StartKind = { LIVE: 0, EARLIEST: 1, POSITION: 2, LAST: 3, SINCE: 4 };
var GapReason = { EXPIRED: 1, SLOW: 2, LOST: 3 };
function gapReasonName(r) {
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
var ErrorCodes = {
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
  25: { name: "INVALID_FILTER", fatal: false }
};
var CODE_UNKNOWN_SUBSCRIPTION = 10;
var CODE_UNAUTHENTICATED = 12;
var CODE_FORBIDDEN = 13;
var CODE_OUTCOME_UNKNOWN = 23;
var CODE_TOKEN_EXPIRED = 24;
function codeName(code) {
  return ErrorCodes[code]?.name ?? `Code(${code})`;
}
function codeFatal(code) {
  return ErrorCodes[code]?.fatal ?? false;
}
var MalformedFrameError = class extends Error {
  constructor(message) {
    super(`sluice: malformed frame: ${message}`);
    this.name = "MalformedFrameError";
  }
};
var InvalidHeadersError = class extends Error {
  constructor(message) {
    super(`sluice: invalid message headers: ${message}`);
    this.name = "InvalidHeadersError";
  }
};
var InvalidChannelError = class extends Error {
  constructor(message) {
    super(`sluice: invalid channel name: ${message}`);
    this.name = "InvalidChannelError";
  }
};
var NO_HEADERS = Object.freeze([]);
var enc = new TextEncoder();
var dec = new TextDecoder("utf-8", { fatal: false });
var strictDec = new TextDecoder("utf-8", { fatal: true });
function utf8(s) {
  return enc.encode(s);
}
var Writer = class {
  buf;
  view;
  off = 0;
  constructor(size) {
    this.buf = new Uint8Array(size);
    this.view = new DataView(this.buf.buffer);
  }
  u8(v) {
    this.view.setUint8(this.off, v);
    this.off += 1;
  }
  u16(v) {
    this.view.setUint16(this.off, v);
    this.off += 2;
  }
  u32(v) {
    this.view.setUint32(this.off, v >>> 0);
    this.off += 4;
  }
  /** A position, epoch or start argument: a safe non-negative integer (checkU64). */
  u64(v) {
    checkU64(v, "u64");
    this.view.setUint32(this.off, Math.floor(v / 4294967296));
    this.view.setUint32(this.off + 4, v % 4294967296);
    this.off += 8;
  }
  /** A u64 that is an identifier, not a position (e.g. a presence member's connection). */
  u64big(v) {
    this.view.setBigUint64(this.off, BigInt.asUintN(64, v));
    this.off += 8;
  }
  bytes(b) {
    this.buf.set(b, this.off);
    this.off += b.length;
  }
};
function frame(type, flags, id, bodyLen) {
  if (bodyLen < 0 || bodyLen > 4294967295) throw new RangeError(`${typeName(type)} body length ${bodyLen}`);
  const w = new Writer(HEADER_LEN + bodyLen);
  w.u32(bodyLen);
  w.u8(type);
  w.u8(flags);
  w.u32(id);
  return w;
}
function checkU64(v, field) {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    throw new RangeError(`${field} ${typeof v === "bigint" ? `${v}n` : String(v)} is not an integer in 0..2^53-1`);
  }
  return v;
}
function mustFit(type, field, n, max) {
  if (n > max) throw new RangeError(`${typeName(type)}: ${field} ${n} exceeds ${max}`);
}
function encodeHello(id, h) {
  const name = utf8(h.name);
  mustFit(FrameType.HELLO, "name length", name.length, MAX_NAME_LEN);
  mustFit(FrameType.HELLO, "token length", h.token.length, 65535);
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
function encodeWelcome(id, v) {
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
function encodePublish(id, flags, channel, payload, ext) {
  const ch = typeof channel === "string" ? utf8(channel) : channel;
  mustFit(FrameType.PUBLISH, "channel length", ch.length, MAX_CHANNEL_LEN);
  const extended = hasExt(ext);
  const hs = extended ? encodeHeaderFields(ext.headers ?? []) : null;
  const body = extended ? extLen(ext.msgId ?? null, hs, payload.length) : payload.length;
  const w = frame(FrameType.PUBLISH, extended ? flags | FLAG_EXT : flags, id, 1 + ch.length + body);
  w.u8(ch.length);
  w.bytes(ch);
  if (extended) writeExt(w, ext.msgId ?? null, hs);
  w.bytes(payload);
  return w.buf;
}
function hasExt(ext) {
  return !!ext && ((ext.msgId?.length ?? 0) > 0 || (ext.headers?.length ?? 0) > 0);
}
function encodeHeaderFields(hs) {
  return hs.map((h) => [utf8(h.key), utf8(h.value)]);
}
function headersLen(hs) {
  let n = 0;
  for (const [k, v] of hs) n += 1 + k.length + 2 + v.length;
  return n;
}
function extLen(msgId, hs, payloadLen) {
  let n = 1 + payloadLen;
  if (msgId && msgId.length > 0) n += 1 + msgId.length;
  if (hs.length > 0) n += 2 + headersLen(hs);
  return n;
}
function writeExt(w, msgId, hs) {
  const hasID = !!msgId && msgId.length > 0;
  w.u8((hasID ? EXT_MSGID : 0) | (hs.length > 0 ? EXT_HEADERS : 0));
  if (hasID) {
    mustFit(FrameType.PUBLISH, "message id length", msgId.length, MAX_MSGID_LEN);
    w.u8(msgId.length);
    w.bytes(msgId);
  }
  if (hs.length > 0) {
    w.u16(headersLen(hs));
    for (const [k, v] of hs) {
      mustFit(FrameType.PUBLISH, "header key length", k.length, MAX_HEADER_KEY_LEN);
      mustFit(FrameType.PUBLISH, "header value length", v.length, 65535);
      w.u8(k.length);
      w.bytes(k);
      w.u16(v.length);
      w.bytes(v);
    }
  }
}
function encodeExt(ext, payload) {
  if (!hasExt(ext)) throw new RangeError("encodeExt without a message id or headers");
  const hs = encodeHeaderFields(ext.headers ?? []);
  const w = new Writer(extLen(ext.msgId ?? null, hs, payload.length));
  writeExt(w, ext.msgId ?? null, hs);
  w.bytes(payload);
  return w.buf;
}
var tokenByte = (c) => c >= 97 && c <= 122 || c >= 65 && c <= 90 || c >= 48 && c <= 57 || "!#$%&'*+-.^_`|~".includes(String.fromCharCode(c));
function checkExt(ext) {
  if (ext.msgId && (ext.msgId.length === 0 || ext.msgId.length > MAX_MSGID_LEN)) {
    throw new InvalidHeadersError(`message id length ${ext.msgId.length} outside 1..${MAX_MSGID_LEN}`);
  }
  const hs = ext.headers ?? [];
  if (hs.length > MAX_HEADERS) throw new InvalidHeadersError(`${hs.length} headers, at most ${MAX_HEADERS}`);
  const enc2 = encodeHeaderFields(hs);
  const n = headersLen(enc2);
  if (n > MAX_HEADERS_LEN) throw new InvalidHeadersError(`header block of ${n} bytes, at most ${MAX_HEADERS_LEN}`);
  enc2.forEach(([k, v], i) => {
    const key = hs[i].key;
    if (k.length === 0 || k.length > MAX_HEADER_KEY_LEN) {
      throw new InvalidHeadersError(`key length ${k.length} outside 1..${MAX_HEADER_KEY_LEN}`);
    }
    k.forEach((c, j) => {
      if (!tokenByte(c)) throw new InvalidHeadersError(`key ${JSON.stringify(key)}: byte 0x${c.toString(16)} at ${j} is not a token character`);
    });
    if (hasLoneSurrogate(hs[i].value)) throw new InvalidHeadersError(`header ${JSON.stringify(key)}: value is not valid UTF-8`);
    v.forEach((c, j) => {
      if (c < 32 && c !== 9 || c === 127) {
        throw new InvalidHeadersError(`header ${JSON.stringify(key)}: value has control character 0x${c.toString(16)} at ${j}`);
      }
    });
  });
}
function decodeExt(body, frameName = "DATA") {
  const d = new Reader(body, frameName);
  const f = d.u8("ext flags");
  if (d.err === null && f === 0) d.fail("extended record without a message id or headers");
  if (d.err === null && (f & ~(EXT_MSGID | EXT_HEADERS)) !== 0) d.fail(`ext flags 0x${f.toString(16).padStart(2, "0")}: undefined bits`);
  let msgId = null;
  const headers = [];
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
          value: dec.decode(block.subarray(off + 3 + k, off + 3 + k + v))
        });
        off += 3 + k + v;
      }
    }
  }
  const payload = d.rest();
  d.check();
  return { payload, msgId, headers };
}
function encodePubAck(acks) {
  mustFit(FrameType.PUBACK, "ack count", acks.length, 65535);
  const w = frame(FrameType.PUBACK, 0, 0, 2 + 12 * acks.length);
  w.u16(acks.length);
  for (const a of acks) {
    w.u32(a.id);
    w.u64(checkU64(a.position, "position"));
  }
  return w.buf;
}
function encodeSubscribe(id, s) {
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
function encodeSubscribed(id, s) {
  const w = frame(FrameType.SUBSCRIBED, 0, id, 36);
  w.u32(s.subID);
  w.u64(checkU64(s.first, "first"));
  w.u64(checkU64(s.earliest, "earliest"));
  w.u64(checkU64(s.next, "next"));
  w.u64(checkU64(s.epoch, "epoch"));
  return w.buf;
}
function encodeUnsubscribe(id, subID) {
  const w = frame(FrameType.UNSUBSCRIBE, 0, id, 4);
  w.u32(subID);
  return w.buf;
}
function encodeUnsubscribed(id, subID) {
  const w = frame(FrameType.UNSUBSCRIBED, 0, id, 4);
  w.u32(subID);
  return w.buf;
}
function encodeData(subID, first, records) {
  const bodies = records.map(
    (r) => r instanceof Uint8Array ? { ext: false, b: r } : hasExt(r) ? { ext: true, b: encodeExt(r, r.payload) } : { ext: false, b: r.payload }
  );
  let n = DATA_PREFIX_LEN;
  for (const r of bodies) n += 4 + r.b.length;
  const w = frame(FrameType.DATA, 0, subID, n);
  w.u64(checkU64(first, "first"));
  w.u32(bodies.length);
  for (const r of bodies) {
    if (r.b.length > 2147483647) throw new RangeError(`DATA record of ${r.b.length} bytes`);
    w.u32(r.ext ? (RECORD_EXT | r.b.length) >>> 0 : r.b.length);
    w.bytes(r.b);
  }
  return w.buf;
}
function encodeGap(subID, g) {
  const w = frame(FrameType.GAP, 0, subID, 17);
  w.u64(checkU64(g.from, "from"));
  w.u64(checkU64(g.to, "to"));
  w.u8(g.reason);
  return w.buf;
}
function encodePing(id) {
  return frame(FrameType.PING, 0, id, 0).buf;
}
function encodePong(id) {
  return frame(FrameType.PONG, 0, id, 0).buf;
}
function encodeCodeText(type, flags, id, code, text) {
  const t = utf8(text);
  mustFit(type, "text length", t.length, 65535);
  const w = frame(type, flags, id, 4 + t.length);
  w.u16(code);
  w.u16(t.length);
  w.bytes(t);
  return w.buf;
}
function encodeError(id, e) {
  return encodeCodeText(FrameType.ERROR, e.retriable ? FLAG_RETRIABLE : 0, id, e.code, e.text);
}
function encodeGoAway(g) {
  return encodeCodeText(FrameType.GOAWAY, 0, 0, g.code, g.text);
}
var Reader = class {
  constructor(b, frameName) {
    this.b = b;
    this.frameName = frameName;
    this.view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }
  b;
  frameName;
  off = 0;
  err = null;
  view;
  need(n, field) {
    if (this.err !== null) return false;
    if (n > this.b.length - this.off) {
      this.err = `${this.frameName}: ${field} at offset ${this.off} needs ${n} bytes, body has ${this.b.length}`;
      return false;
    }
    return true;
  }
  fail(msg) {
    if (this.err === null) this.err = `${this.frameName}: ${msg}`;
  }
  u8(field) {
    if (!this.need(1, field)) return 0;
    return this.view.getUint8(this.off++);
  }
  u16(field) {
    if (!this.need(2, field)) return 0;
    const v = this.view.getUint16(this.off);
    this.off += 2;
    return v;
  }
  u32(field) {
    if (!this.need(4, field)) return 0;
    const v = this.view.getUint32(this.off);
    this.off += 4;
    return v;
  }
  /**
   * A position, epoch or start argument: a u64 above 2^53-1 fails (a
   * number would round it), naming the field and its offset.
   */
  u64(field) {
    if (!this.need(8, field)) return 0;
    const hi = this.view.getUint32(this.off);
    const lo = this.view.getUint32(this.off + 4);
    if (hi > 2097151) {
      this.fail(`${field} ${BigInt(hi) << 32n | BigInt(lo)} at offset ${this.off} exceeds 2^53-1, the largest this SDK represents exactly`);
      return 0;
    }
    this.off += 8;
    return hi * 4294967296 + lo;
  }
  /** A u64 that is an identifier, not a position (e.g. a presence member's connection). */
  u64big(field) {
    if (!this.need(8, field)) return 0n;
    const v = this.view.getBigUint64(this.off);
    this.off += 8;
    return v;
  }
  bytes(n, field) {
    if (!this.need(n, field)) return new Uint8Array(0);
    const v = this.b.subarray(this.off, this.off + n);
    this.off += n;
    return v;
  }
  rest() {
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
};
function decodeFrame(msg, maxBody) {
  if (msg.length < HEADER_LEN) {
    throw new MalformedFrameError(`message of ${msg.length} bytes is shorter than a frame header`);
  }
  const v = new DataView(msg.buffer, msg.byteOffset, msg.byteLength);
  const header = { len: v.getUint32(0), type: v.getUint8(4), flags: v.getUint8(5), id: v.getUint32(6) };
  if (header.len > maxBody) {
    throw new MalformedFrameError(
      `${typeName(header.type)}: declared body length ${header.len} exceeds the limit ${maxBody}`
    );
  }
  if (msg.length - HEADER_LEN !== header.len) {
    throw new MalformedFrameError(
      `${typeName(header.type)}: declared body length ${header.len}, the message carries ${msg.length - HEADER_LEN}`
    );
  }
  return { header, body: msg.subarray(HEADER_LEN) };
}
function decodeHello(body) {
  const d = new Reader(body, "HELLO");
  const minVersion = d.u16("minVersion");
  const maxVersion = d.u16("maxVersion");
  const features = d.u32("features");
  const name = dec.decode(d.bytes(d.u8("nameLen"), "name"));
  const token = d.bytes(d.u16("tokenLen"), "token");
  d.check();
  return { minVersion, maxVersion, features, name, token };
}
function decodeWelcome(body) {
  const d = new Reader(body, "WELCOME");
  const w = {
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
    nodes: []
  };
  w.serverName = dec.decode(d.bytes(d.u8("serverNameLen"), "serverName"));
  const count = d.u16("nodeCount");
  if (d.need(count, "node list")) {
    for (let i = 0; i < count && d.err === null; i++) {
      w.nodes.push(dec.decode(d.bytes(d.u8("node address length"), "node address")));
    }
  }
  if (d.err === null && (w.features & FEATURE_HEADERS) !== 0 && d.b.length - d.off >= 8) {
    w.dedupWindowMs = d.u32("dedupWindowMs");
    w.dedupIDs = d.u32("dedupIDs");
  }
  d.check();
  return w;
}
function decodePublish(body, flags = 0) {
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
function decodePubAck(body) {
  const d = new Reader(body, "PUBACK");
  const count = d.u16("count");
  if (d.err === null && count === 0) d.fail("ack count 0");
  if (d.err === null && body.length !== 2 + 12 * count) {
    d.fail(`body length ${body.length}, want ${2 + 12 * count} for ${count} acks`);
  }
  d.check();
  const acks = new Array(count);
  for (let i = 0; i < count; i++) {
    const id = d.u32("request id");
    acks[i] = { id, position: d.u64("position") };
  }
  d.check();
  return acks;
}
function decodeSubscribe(body) {
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
function decodeSubscribed(body) {
  const d = new Reader(body, "SUBSCRIBED");
  const s = {
    subID: d.u32("subID"),
    first: d.u64("first"),
    earliest: d.u64("earliest"),
    next: d.u64("next"),
    epoch: d.u64("epoch")
  };
  d.check();
  return s;
}
function decodeSubID(name, body) {
  const d = new Reader(body, name);
  const v = d.u32("subID");
  d.exact();
  d.check();
  return v;
}
function decodeUnsubscribe(body) {
  return decodeSubID("UNSUBSCRIBE", body);
}
function decodeUnsubscribed(body) {
  return decodeSubID("UNSUBSCRIBED", body);
}
function decodeData(body) {
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
  const out = new Array(count);
  let off = 0;
  for (let i = 0; i < count; i++) {
    if (records.length - off < 4) {
      throw new MalformedFrameError(
        `DATA: record ${i} of ${count}: length field at offset ${DATA_PREFIX_LEN + off} overruns the body (${body.length} bytes)`
      );
    }
    const word = rv.getUint32(off);
    const n = (word & ~RECORD_EXT) >>> 0;
    off += 4;
    if (n > records.length - off) {
      throw new MalformedFrameError(
        `DATA: record ${i} of ${count}: length ${n} at offset ${DATA_PREFIX_LEN + off - 4} overruns the body (${body.length} bytes)`
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
function decodeGap(body) {
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
function decodePing(body) {
  const d = new Reader(body, "PING");
  d.exact();
  d.check();
}
function decodePong(body) {
  const d = new Reader(body, "PONG");
  d.exact();
  d.check();
}
function decodeCodeText(name, body) {
  const d = new Reader(body, name);
  const code = d.u16("code");
  const text = dec.decode(d.bytes(d.u16("textLen"), "text"));
  d.exact();
  d.check();
  return { code, text };
}
function decodeError(h, body) {
  const { code, text } = decodeCodeText("ERROR", body);
  return { code, retriable: (h.flags & FLAG_RETRIABLE) !== 0, text };
}
function decodeGoAway(body) {
  return decodeCodeText("GOAWAY", body);
}
function validChannel(name) {
  const b = typeof name === "string" ? utf8(name) : name;
  if (b.length === 0) throw new InvalidChannelError("empty");
  if (b.length > MAX_CHANNEL_LEN) throw new InvalidChannelError(`${b.length} bytes, more than ${MAX_CHANNEL_LEN}`);
  let s;
  try {
    s = typeof name === "string" ? name : strictDec.decode(b);
  } catch {
    throw new InvalidChannelError("invalid UTF-8");
  }
  if (typeof name === "string" && hasLoneSurrogate(name)) {
    throw new InvalidChannelError("invalid UTF-8 (a lone surrogate)");
  }
  let off = 0;
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    if (isSpace(cp) || isControl(cp)) {
      throw new InvalidChannelError(
        `U+${cp.toString(16).toUpperCase().padStart(4, "0")} at offset ${off} is white space or a control character`
      );
    }
    off += utf8Len(cp);
  }
  return b;
}
function hasLoneSurrogate(s) {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 55296 && c <= 56319) {
      const d = s.charCodeAt(i + 1);
      if (!(d >= 56320 && d <= 57343)) return true;
      i++;
    } else if (c >= 56320 && c <= 57343) return true;
  }
  return false;
}
function utf8Len(cp) {
  return cp < 128 ? 1 : cp < 2048 ? 2 : cp < 65536 ? 3 : 4;
}
function isSpace(cp) {
  if (cp <= 255) return cp === 32 || cp >= 9 && cp <= 13 || cp === 133 || cp === 160;
  return cp === 5760 || cp >= 8192 && cp <= 8202 || cp === 8232 || cp === 8233 || cp === 8239 || cp === 8287 || cp === 12288;
}
function isControl(cp) {
  return cp < 32 || cp >= 127 && cp < 160;
}

// src/errors.ts
var SluiceError = class extends Error {
  constructor(message, options) {
    super(message, options);
    this.name = new.target.name;
  }
};
var ClosedError = class extends SluiceError {
  constructor(cause) {
    super(cause ? `sluice: connection closed: ${errText(cause)}` : "sluice: connection closed", { cause });
  }
};
var DrainingError = class extends SluiceError {
  constructor() {
    super("sluice: connection draining");
  }
};
var UnknownOutcomeError = class extends SluiceError {
  constructor(cause) {
    super(`sluice: publish outcome unknown${cause ? ": " + errText(cause) : ""}`, { cause });
  }
};
var DisconnectedError = class extends SluiceError {
  constructor(why, cause) {
    super(`sluice: disconnected: ${why}`, { cause });
  }
};
var ProtocolError = class extends SluiceError {
  constructor(why, cause) {
    super(`sluice: protocol violation by server: ${why}`, { cause });
  }
};
var PayloadTooLargeError = class extends SluiceError {
};
var InvalidOptionError = class extends SluiceError {
};
var UnsubscribedError = class extends SluiceError {
  constructor() {
    super("sluice: unsubscribed");
  }
};
var ServerError = class extends SluiceError {
  constructor(op, code, retriable, text) {
    super(`sluice: ${op}: ${codeName(code)}${text ? ": " + text : ""}`);
    this.op = op;
    this.code = code;
    this.retriable = retriable;
    this.text = text;
    this.codeName = codeName(code);
  }
  op;
  code;
  retriable;
  text;
  codeName;
};
function errText(e) {
  return e instanceof Error ? e.message : String(e);
}
var PresenceUnsupportedError = class extends SluiceError {
};
var FiltersUnsupportedError = class extends SluiceError {
  constructor(serverName, channel, filter) {
    super(`sluice: server ${serverName} does not offer filters: subscription to ${JSON.stringify(channel)} with filter ${JSON.stringify(filter)}`);
    this.serverName = serverName;
    this.channel = channel;
    this.filter = filter;
  }
  serverName;
  channel;
  filter;
};

// src/presence.ts
var presence_exports = {};
__export(presence_exports, {
  FEATURE_PRESENCE: () => FEATURE_PRESENCE,
  FLAG_COUNTS_ONLY: () => FLAG_COUNTS_ONLY,
  FLAG_EVENTS_PAUSED: () => FLAG_EVENTS_PAUSED,
  FLAG_MORE: () => FLAG_MORE,
  FLAG_OCCUPANCY: () => FLAG_OCCUPANCY,
  FLAG_PARTIAL: () => FLAG_PARTIAL,
  FLAG_PRESENCE: () => FLAG_PRESENCE,
  FLAG_PRESENCE_EVENTS: () => FLAG_PRESENCE_EVENTS,
  MAX_CLIENT_ID_LEN: () => MAX_CLIENT_ID_LEN,
  MAX_CLIENT_INFO_LEN: () => MAX_CLIENT_INFO_LEN,
  MemberSet: () => MemberSet,
  PresenceType: () => PresenceType,
  decodeOccupancy: () => decodeOccupancy,
  decodePresence: () => decodePresence,
  decodePresenceEvent: () => decodePresenceEvent,
  decodePresenceState: () => decodePresenceState,
  encodeOccupancy: () => encodeOccupancy,
  encodePresence: () => encodePresence,
  encodePresenceEvent: () => encodePresenceEvent,
  encodePresenceState: () => encodePresenceState,
  sortMembers: () => sortMembers,
  subscribeFlags: () => subscribeFlags,
  withFlags: () => withFlags
});
var PresenceType = {
  PRESENCE: 18,
  PRESENCE_STATE: 19,
  PRESENCE_EVENT: 20,
  OCCUPANCY: 21
};
var FEATURE_PRESENCE = 1 << 4;
var FLAG_PRESENCE = 16;
var FLAG_PRESENCE_EVENTS = 32;
var FLAG_OCCUPANCY = 64;
var FLAG_COUNTS_ONLY = 1;
var FLAG_MORE = 1;
var FLAG_PARTIAL = 2;
var FLAG_EVENTS_PAUSED = 1;
var MAX_CLIENT_ID_LEN = 255;
var MAX_CLIENT_INFO_LEN = 4096;
var MEMBER_MIN_LEN = 13;
var dec2 = new TextDecoder("utf-8", { fatal: false });
function encodePresence(id, channel, countsOnly = false) {
  const ch = validChannel(channel);
  const w = frame(PresenceType.PRESENCE, countsOnly ? FLAG_COUNTS_ONLY : 0, id, 1 + ch.length);
  w.u8(ch.length);
  w.bytes(ch);
  return w.buf;
}
function decodePresence(body) {
  const d = new Reader(body, "PRESENCE");
  const n = d.u8("channelLen");
  if (d.err === null && n === 0) d.fail("empty channel");
  const ch = d.bytes(n, "channel");
  d.exact();
  d.check();
  return dec2.decode(ch);
}
function memberLen(m) {
  return 1 + utf8(m.clientId).length + 1 + utf8(m.node).length + 8 + 2 + m.info.length;
}
function writeMember(w, m) {
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
function readMember(d) {
  const clientId = dec2.decode(d.bytes(d.u8("clientIDLen"), "clientID"));
  const nl = d.u8("nodeLen");
  if (d.err === null && nl === 0) d.fail(`empty node name at offset ${d.off - 1}`);
  const node = dec2.decode(d.bytes(nl, "node"));
  const conn = d.u64big("conn");
  const il = d.u16("infoLen");
  if (d.err === null && il > MAX_CLIENT_INFO_LEN) d.fail(`client info length ${il} exceeds ${MAX_CLIENT_INFO_LEN}`);
  const info = d.bytes(il, "info").slice();
  return { clientId, node, conn, info };
}
function readOcc(d) {
  return { subscribers: d.u32("subscribers"), publishers: d.u32("publishers"), members: d.u32("members") };
}
function encodePresenceState(id, flags, o, members) {
  const w = frame(PresenceType.PRESENCE_STATE, flags, id, 14 + members.reduce((n, m) => n + memberLen(m), 0));
  w.u32(o.subscribers);
  w.u32(o.publishers);
  w.u32(o.members);
  w.u16(members.length);
  for (const m of members) writeMember(w, m);
  return w.buf;
}
function decodePresenceState(body) {
  const d = new Reader(body, "PRESENCE_STATE");
  const occupancy = readOcc(d);
  const count = d.u16("count");
  if (d.err === null && count > Math.floor((body.length - d.off) / MEMBER_MIN_LEN)) {
    d.fail(`${count} members cannot fit in ${body.length - d.off} bytes`);
  }
  d.check();
  const members = [];
  for (let i = 0; i < count && d.err === null; i++) members.push(readMember(d));
  d.exact();
  d.check();
  return { occupancy, members };
}
function encodePresenceEvent(subID, changes) {
  const w = frame(PresenceType.PRESENCE_EVENT, 0, subID, 2 + changes.reduce((n, c) => n + 1 + memberLen(c.member), 0));
  w.u16(changes.length);
  for (const c of changes) {
    w.u8(c.kind === "join" ? 1 : 2);
    writeMember(w, c.member);
  }
  return w.buf;
}
function decodePresenceEvent(body) {
  const d = new Reader(body, "PRESENCE_EVENT");
  const count = d.u16("count");
  if (d.err === null && count === 0) d.fail("change count 0");
  if (d.err === null && count > Math.floor((body.length - d.off) / (1 + MEMBER_MIN_LEN))) {
    d.fail(`${count} changes cannot fit in ${body.length - d.off} bytes`);
  }
  d.check();
  const out = [];
  for (let i = 0; i < count && d.err === null; i++) {
    const k = d.u8("kind");
    if (d.err === null && k !== 1 && k !== 2) d.fail(`change ${i}: kind ${k} undefined`);
    out.push({ kind: k === 1 ? "join" : "leave", member: readMember(d) });
  }
  d.exact();
  d.check();
  return out;
}
function encodeOccupancy(subID, paused, o) {
  const w = frame(PresenceType.OCCUPANCY, paused ? FLAG_EVENTS_PAUSED : 0, subID, 12);
  w.u32(o.subscribers);
  w.u32(o.publishers);
  w.u32(o.members);
  return w.buf;
}
function decodeOccupancy(body) {
  const d = new Reader(body, "OCCUPANCY");
  const o = readOcc(d);
  d.exact();
  d.check();
  return o;
}
function withFlags(f, flags) {
  if (f.length < HEADER_LEN) throw new MalformedFrameError("not a frame");
  f[5] = flags;
  return f;
}
function subscribeFlags(o) {
  return (o.presence ? FLAG_PRESENCE : 0) | (o.presenceEvents ? FLAG_PRESENCE_EVENTS : 0) | (o.occupancy ? FLAG_OCCUPANCY : 0);
}
function sortMembers(ms) {
  return ms.sort(
    (a, b) => a.clientId !== b.clientId ? a.clientId < b.clientId ? -1 : 1 : a.node !== b.node ? a.node < b.node ? -1 : 1 : a.conn < b.conn ? -1 : a.conn > b.conn ? 1 : 0
  );
}
var keyOf = (m) => `${m.clientId}\0${m.node}\0${m.conn}`;
var MemberSet = class {
  m = /* @__PURE__ */ new Map();
  /** The query's request id while its answer is awaited; 0 otherwise. */
  syncing = 0;
  synced = false;
  partial = false;
  paused = false;
  /** A query was sent with request id. */
  started(id) {
    this.syncing = id;
    this.synced = false;
  }
  /** The query's answer. */
  answered(members, partial) {
    this.syncing = 0;
    this.m.clear();
    for (const x of members) this.m.set(keyOf(x), x);
    this.synced = !this.paused;
    this.partial = partial;
  }
  /** A join or leave delivered to the subscription. */
  apply(c) {
    if (!this.synced) return;
    if (c.kind === "join") this.m.set(keyOf(c.member), c.member);
    else this.m.delete(keyOf(c.member));
  }
  /** An occupancy's EVENTS_PAUSED; true when a resume asks for a new query. */
  pause(paused) {
    const was = this.paused;
    this.paused = paused;
    if (paused) this.synced = false;
    return was && !paused && this.syncing === 0;
  }
  /** The set, sorted; complete unless not yet answered, paused or partial. */
  snapshot() {
    return { members: sortMembers([...this.m.values()]), complete: this.synced && !this.partial };
  }
};

// src/ws.ts
var SUBPROTOCOL = "sluice.v1";
async function resolveWebSocket(given, maxMessage) {
  if (given) return given;
  const g = globalThis.WebSocket;
  if (typeof g === "function") return g;
  let mod;
  try {
    const name = "ws";
    mod = await import(name);
  } catch (e) {
    throw new Error(
      "sluice: no WebSocket in this environment: install the `ws` package or pass the WebSocket option",
      { cause: e }
    );
  }
  const WS = mod.WebSocket ?? mod.default;
  return class extends WS {
    corked = false;
    constructor(url, protocols) {
      super(url, protocols ?? [], { maxPayload: maxMessage });
    }
    // Every frame is its own WebSocket message, and `ws` writes each to the
    // socket at once: one system call per frame. Frames sent in one turn of
    // the event loop are corked into one write instead (a pipelined burst of
    // publishes, say); the socket is uncorked before any I/O happens.
    send(data) {
      const sock = this._socket;
      if (!this.corked && sock && typeof sock.cork === "function" && typeof sock.uncork === "function") {
        this.corked = true;
        sock.cork();
        process.nextTick(() => {
          this.corked = false;
          sock.uncork();
        });
      }
      super.send(data);
    }
  };
}

// src/features.ts
var features_exports = {};
__export(features_exports, {
  MAX_FILTER_LEN: () => MAX_FILTER_LEN,
  decodeAuthed: () => decodeAuthed,
  decodeFData: () => decodeFData,
  decodeRefresh: () => decodeRefresh,
  decodeSubscribeFilter: () => decodeSubscribeFilter,
  encodeAuthed: () => encodeAuthed,
  encodeFData: () => encodeFData,
  encodeRefresh: () => encodeRefresh,
  encodeSubscribeFilter: () => encodeSubscribeFilter
});
var MAX_FILTER_LEN = 1024;
function encodeRefresh(id, token) {
  if (token.length < 1 || token.length > 65535) throw new RangeError(`REFRESH: token length ${token.length}`);
  const w = frame(FrameType.REFRESH, 0, id, 2 + token.length);
  w.u16(token.length);
  w.bytes(token);
  return w.buf;
}
function decodeRefresh(body) {
  const d = new Reader(body, "REFRESH");
  const n = d.u16("tokenLen");
  if (d.err === null && n === 0) d.fail("empty token");
  const token = d.bytes(n, "token");
  d.exact();
  d.check();
  return token;
}
function encodeAuthed(id, a) {
  const cid = utf8(a.clientId);
  if (cid.length > 255) throw new RangeError(`AUTHED: client id of ${cid.length} bytes`);
  const w = frame(FrameType.AUTHED, 0, id, 9 + cid.length);
  w.u32(a.expiresInMs);
  w.u32(a.graceMs);
  w.u8(cid.length);
  w.bytes(cid);
  return w.buf;
}
var dec3 = new TextDecoder("utf-8", { fatal: false });
function decodeAuthed(body) {
  const d = new Reader(body, "AUTHED");
  const expiresInMs = d.u32("expiresInMs");
  const graceMs = d.u32("graceMs");
  const clientId = dec3.decode(d.bytes(d.u8("clientIDLen"), "clientID"));
  d.exact();
  d.check();
  return { expiresInMs, graceMs, clientId };
}
function encodeSubscribeFilter(id, s, filter) {
  const f = utf8(filter);
  if (f.length < 1 || f.length > 65535) throw new RangeError(`SUBSCRIBE: filter of ${f.length} bytes`);
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
function decodeSubscribeFilter(body) {
  const cl = body.length >= 22 ? body[21] : 0;
  const end = Math.min(body.length, 22 + cl);
  const sub = decodeSubscribe(body.subarray(0, end));
  const d = new Reader(body.subarray(end), "SUBSCRIBE");
  const n = d.u16("filterLen");
  if (d.err === null && n === 0) d.fail("empty filter");
  const filter = dec3.decode(d.bytes(n, "filter"));
  d.exact();
  d.check();
  return { sub, filter };
}
function decodeFData(body) {
  const d = new Reader(body, "FDATA");
  const count = d.u32("count");
  if (d.err === null) {
    if (count === 0) d.fail("entry count 0");
    else if (count > Math.floor((body.length - 4) / 12)) d.fail(`entry count ${count} cannot fit in ${body.length - 4} bytes`);
  }
  d.check();
  const out = new Array(count);
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
function encodeFData(subID, recs) {
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

// src/client.ts
var DEFAULT_NAME = "sluice-js";
var DEFAULT_BACKOFF_MIN_MS = 100;
var DEFAULT_BACKOFF_MAX_MS = 1e4;
var DEFAULT_MAX_PENDING = 1024;
var DEFAULT_CONNECT_TIMEOUT_MS = 5e3;
var DEFAULT_SUB_BUFFER = 1024;
var DEFAULT_MAX_BODY = 64 << 20;
var HANDSHAKE_MAX_BODY = 1 << 20;
var HEALTHY_SESSION_MS = 1e3;
var GOAWAY_GRACE_MS = 2e3;
var NOACK_QUEUE_LIMIT = 1 << 20;
var DRAIN_POLL_MS = 5;
var OFFERED_FEATURES = FEATURE_HEADERS | FEATURE_REFRESH | FEATURE_FILTERS | FEATURE_PRESENCE;
var MAX_AUTH_REFUSALS = 2;
var State = { OPEN: 0, DRAINING: 1, CLOSED: 2 };
function toBytes(p) {
  if (typeof p === "string") return utf8(p);
  if (p instanceof Uint8Array) return p;
  if (p instanceof ArrayBuffer) return new Uint8Array(p);
  throw new InvalidOptionError("sluice: payload must be a string, Uint8Array or ArrayBuffer");
}
function callbackThrew(logger, what, e) {
  if (logger) return logger.warn(`sluice: ${what} callback threw`, e);
  const g = globalThis;
  if (typeof g.reportError === "function") g.reportError(e);
  else console.error(`sluice: ${what} callback threw`, e);
}
function extOf(o, inject) {
  const injected = inject?.();
  if (o.msgId === void 0 && o.headers === void 0 && !injected?.length) return null;
  const msgId = o.msgId === void 0 ? null : toBytes(o.msgId);
  let pairs = o.headers === void 0 ? [] : Array.isArray(o.headers) ? o.headers : Object.entries(o.headers);
  if (injected?.length) pairs = [...pairs, ...injected];
  const ext = { msgId, headers: pairs.map(([key, value]) => ({ key: String(key), value: String(value) })) };
  checkExt(ext);
  return hasExt(ext) ? ext : null;
}
function abortReason(signal) {
  return signal.reason ?? new DOMException("aborted", "AbortError");
}
async function connect(urls, opts = {}) {
  const list = (Array.isArray(urls) ? urls : urls.split(",")).map((u) => u.trim()).filter((u, i, a) => u !== "" && a.indexOf(u) === i);
  if (list.length === 0) throw new InvalidOptionError(`sluice: no URL in ${JSON.stringify(urls)}`);
  const o = checkOptions(opts);
  const WS = await resolveWebSocket(opts.WebSocket, o.maxBody + HEADER_LEN);
  const c = new Client(list, o, WS);
  const errs = [];
  for (let i = 0; i < list.length; i++) {
    c.urlIdx = i;
    try {
      const s = await c.dial(list[i]);
      if (c.install(s)) return c;
      errs.push(s.error ?? new DisconnectedError(`${list[i]} lost right after the handshake`));
    } catch (e) {
      errs.push(e);
    }
  }
  const only = errs.length === 1 ? errs[0] : null;
  if (only instanceof SluiceError) throw only;
  throw new DisconnectedError(
    `could not connect to ${list.join(", ")}: ${errs.map((e) => e instanceof Error ? e.message : String(e)).join("; ")}`,
    errs.length === 1 ? errs[0] : new AggregateError(errs)
  );
}
function checkOptions(o) {
  const token = o.token === void 0 ? new Uint8Array(0) : toBytes(o.token);
  if (token.length > MAX_TOKEN_LEN) {
    throw new InvalidOptionError(`sluice: token is ${token.length} bytes, at most ${MAX_TOKEN_LEN}`);
  }
  const name = o.name ?? DEFAULT_NAME;
  if (utf8(name).length > MAX_NAME_LEN) {
    throw new InvalidOptionError(`sluice: name is longer than ${MAX_NAME_LEN} bytes`);
  }
  const backoffMinMs = o.backoffMinMs ?? DEFAULT_BACKOFF_MIN_MS;
  const backoffMaxMs = o.backoffMaxMs ?? Math.max(DEFAULT_BACKOFF_MAX_MS, backoffMinMs);
  if (!(backoffMinMs > 0) || !(backoffMaxMs >= backoffMinMs)) {
    throw new InvalidOptionError(`sluice: backoff min ${backoffMinMs} max ${backoffMaxMs}`);
  }
  const maxPending = o.maxPending ?? DEFAULT_MAX_PENDING;
  if (!Number.isInteger(maxPending) || maxPending < 1) throw new InvalidOptionError(`sluice: maxPending ${maxPending} < 1`);
  const connectTimeoutMs = o.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  if (!(connectTimeoutMs > 0)) throw new InvalidOptionError(`sluice: connectTimeoutMs ${connectTimeoutMs}`);
  const maxBody = o.maxBody ?? DEFAULT_MAX_BODY;
  if (!(maxBody >= MIN_MAX_BODY)) throw new InvalidOptionError(`sluice: maxBody ${maxBody} < ${MIN_MAX_BODY}`);
  return {
    token,
    tokenProvider: o.tokenProvider,
    name,
    reconnect: o.reconnect ?? true,
    backoffMinMs,
    backoffMaxMs,
    maxPending,
    connectTimeoutMs,
    maxBody,
    onState: o.onState,
    logger: o.logger,
    random: o.random ?? Math.random,
    injectHeaders: o.injectHeaders
  };
}
var Client = class {
  /** @internal */
  constructor(urls, opts, WS) {
    this.urls = urls;
    this.opts = opts;
    this.WS = WS;
    this.closedPromise = new Promise((r) => this.resolveClosed = r);
  }
  urls;
  opts;
  WS;
  /** @internal */
  urlIdx = 0;
  state = State.OPEN;
  cur = null;
  /** Sessions not yet dead: the current one, and one draining after GOAWAY. */
  live = /* @__PURE__ */ new Set();
  reqID = 0;
  nextWireID = 0;
  closeErr = null;
  subs = /* @__PURE__ */ new Set();
  queued = [];
  inflight = 0;
  drainTimer = null;
  reconnecting = false;
  backoffTimer = null;
  backoffWake = null;
  idleWaiters = [];
  /** Presence queries waiting for a session. */
  installWaiters = [];
  closedPromise;
  resolveClosed;
  /** The parameters of the current connection's WELCOME; null while disconnected. */
  get welcome() {
    return this.cur?.welcome ?? null;
  }
  /** The URL of the current connection; null while disconnected. */
  get url() {
    return this.cur?.url ?? null;
  }
  /** Whether a connection is established now. */
  get connected() {
    return this.cur !== null;
  }
  /** Why the client closed, or null while it is open. */
  get error() {
    return this.state === State.CLOSED ? this.closeErr : null;
  }
  /** Resolves when the client has closed for good. */
  get closed() {
    return this.closedPromise;
  }
  /** @internal */
  nextReq() {
    this.reqID = this.reqID + 1 >>> 0;
    if (this.reqID === 0) this.reqID = 1;
    return this.reqID;
  }
  backoff(n) {
    let d = this.opts.backoffMinMs;
    for (let i = 0; i < Math.min(n, 62) && d < this.opts.backoffMaxMs; i++) d *= 2;
    d = Math.min(d, this.opts.backoffMaxMs);
    return Math.floor(this.opts.random() * d) + 1;
  }
  emit(ev) {
    try {
      this.opts.onState?.(ev);
    } catch (e) {
      callbackThrew(this.opts.logger, "onState", e);
    }
  }
  // -------------------------------------------------------------------------
  // Connecting
  /** The id the server knows this client by (a JWT's sub), from its last AUTHED; "" when none. */
  get clientId() {
    return this._clientId;
  }
  /** How many REFRESHes the server accepted. */
  get tokenRefreshes() {
    return this._refreshes;
  }
  /** @internal */
  _clientId = "";
  /** @internal */
  _refreshes = 0;
  /** @internal The token for the next HELLO or REFRESH. */
  async helloToken() {
    if (!this.opts.tokenProvider) return this.opts.token;
    const tok = toBytes(await this.opts.tokenProvider());
    if (tok.length > MAX_TOKEN_LEN) {
      throw new InvalidOptionError(`sluice: the token provider returned ${tok.length} bytes, at most ${MAX_TOKEN_LEN}`);
    }
    return tok;
  }
  /** @internal Gets the token, opens url and performs the handshake; resolves to a live session. */
  async dial(url) {
    let token;
    try {
      token = await this.helloToken();
    } catch (e) {
      throw new DisconnectedError(`token provider: ${e instanceof Error ? e.message : e}`, e);
    }
    return this.open(url, token);
  }
  open(url, token) {
    return new Promise((resolve, reject) => {
      let ws;
      try {
        ws = new this.WS(url, [SUBPROTOCOL]);
      } catch (e) {
        reject(new DisconnectedError(`cannot open ${url}: ${e instanceof Error ? e.message : e}`, e));
        return;
      }
      ws.binaryType = "arraybuffer";
      const helloID = this.nextReq();
      let settled = false;
      const finish = (err, s) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) {
          ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
          try {
            ws.close();
          } catch {
          }
          reject(err);
        } else resolve(s);
      };
      const timer = setTimeout(
        () => finish(new DisconnectedError(`handshake with ${url} timed out after ${this.opts.connectTimeoutMs} ms`)),
        this.opts.connectTimeoutMs
      );
      ws.onopen = () => {
        ws.send(
          encodeHello(helloID, {
            minVersion: VERSION_1,
            maxVersion: VERSION_1,
            features: OFFERED_FEATURES,
            name: this.opts.name,
            token
          })
        );
      };
      ws.onerror = () => {
      };
      ws.onclose = (ev) => finish(new DisconnectedError(`${url} closed during the handshake (code ${ev.code}${ev.reason ? ", " + ev.reason : ""})`));
      ws.onmessage = (ev) => {
        let w;
        try {
          w = this.handshake(ev.data, helloID);
        } catch (e) {
          finish(e);
          return;
        }
        const s = new Session(this, ws, url, w);
        this.live.add(s);
        s.start();
        finish(null, s);
      };
    });
  }
  /** Checks the server's answer to HELLO: WELCOME, or an ERROR to throw. */
  handshake(data, helloID) {
    if (!(data instanceof ArrayBuffer)) throw new ProtocolError("a text message instead of WELCOME");
    let f;
    try {
      f = decodeFrame(new Uint8Array(data), Math.min(HANDSHAKE_MAX_BODY, this.opts.maxBody));
      if (f.header.type === FrameType.ERROR) {
        const e = decodeError(f.header, f.body);
        throw new ServerError("hello", e.code, e.retriable, e.text);
      }
      if (f.header.type !== FrameType.WELCOME) {
        throw new ProtocolError(`${typeName(f.header.type)} instead of WELCOME`);
      }
      const w = decodeWelcome(f.body);
      if (f.header.id !== helloID) throw new ProtocolError(`WELCOME id ${f.header.id}, HELLO id ${helloID}`);
      if (w.version !== VERSION_1) throw new ProtocolError(`WELCOME chose version ${w.version}, offered 1..1`);
      if (w.maxBody < MIN_MAX_BODY) throw new ProtocolError(`WELCOME maxBody ${w.maxBody} < ${MIN_MAX_BODY}`);
      if ((w.features & ~OFFERED_FEATURES) !== 0) {
        throw new ProtocolError(`WELCOME accepted features 0x${(w.features & ~OFFERED_FEATURES).toString(16)} that were not offered`);
      }
      return w;
    } catch (e) {
      if (e instanceof MalformedFrameError) throw new ProtocolError(e.message, e);
      throw e;
    }
  }
  /** @internal Makes s the current session and resubscribes everything on it. */
  install(s) {
    if (this.state === State.CLOSED) {
      s.fail(new ClosedError());
      return false;
    }
    if (s.dead) return false;
    s.installed = true;
    this.cur = s;
    this.opts.logger?.info("sluice: connected", s.url, s.welcome.serverName);
    this.emit({ state: "connected", url: s.url, serverName: s.welcome.serverName });
    for (const sub of this.subs) {
      if (!sub.paused) this.sendSubscribe(s, sub);
    }
    this.pump();
    this.wakeInstallWaiters();
    return true;
  }
  /** @internal Called by a session that ended (at most once per session). */
  sessionEnded(s, err) {
    this.live.delete(s);
    if (this.cur === s) this.cur = null;
    if (this.state === State.CLOSED || !s.installed) return;
    this.emit({ state: "disconnected", url: s.url, error: err });
    if (!this.opts.reconnect) {
      this.finish(new ClosedError(err));
      return;
    }
    this.opts.logger?.warn("sluice: disconnected", s.url, err.message);
    void this.reconnect(Date.now() - s.started >= HEALTHY_SESSION_MS);
  }
  /** @internal A session stops taking requests (GOAWAY): new ones wait for the next. */
  detach(s) {
    if (this.cur === s) this.cur = null;
  }
  attempt = 0;
  async reconnect(healthy) {
    if (this.reconnecting) return;
    this.reconnecting = true;
    if (healthy) this.attempt = 0;
    let refused = 0;
    try {
      while (this.state !== State.CLOSED) {
        await new Promise((r) => {
          this.backoffWake = r;
          this.backoffTimer = setTimeout(r, this.backoff(this.attempt));
        });
        this.backoffTimer = null;
        this.backoffWake = null;
        if (this.state === State.CLOSED) return;
        this.attempt++;
        this.urlIdx = (this.urlIdx + 1) % this.urls.length;
        const url = this.urls[this.urlIdx];
        let s;
        try {
          s = await this.dial(url);
        } catch (e) {
          this.opts.logger?.warn("sluice: reconnect failed", url, this.attempt, e.message);
          if (e instanceof ServerError && e.code === CODE_UNAUTHENTICATED) {
            if (++refused >= MAX_AUTH_REFUSALS) {
              this.finish(new ClosedError(e));
              return;
            }
          } else refused = 0;
          continue;
        }
        if (this.install(s)) return;
      }
    } finally {
      this.reconnecting = false;
    }
  }
  /** Ends the client for good with cause. */
  finish(cause) {
    if (this.state !== State.CLOSED) {
      this.state = State.CLOSED;
      this.closeErr = cause;
    }
    if (this.backoffTimer) clearTimeout(this.backoffTimer);
    this.backoffWake?.();
    if (this.drainTimer) clearTimeout(this.drainTimer);
    const err = this.closeErr;
    this.cur = null;
    for (const s of [...this.live]) s.fail(err);
    for (const q of this.queued.splice(0)) this.rejectQueued(q, err);
    for (const sub of [...this.subs]) {
      this.subs.delete(sub);
      sub.terminate(err);
    }
    for (const w of this.idleWaiters.splice(0)) w();
    this.wakeInstallWaiters();
    this.emit({ state: "closed", error: err });
    this.resolveClosed();
  }
  /**
   * Closes at once: publishes awaiting their acknowledgement reject with
   * UnknownOutcomeError, publishes not yet sent and later calls with
   * ClosedError, and subscriptions end (iterators finish their queued
   * events, then throw ClosedError). Idempotent.
   */
  close() {
    if (this.state === State.CLOSED) return;
    this.finish(new ClosedError());
  }
  /**
   * Closes gracefully: new publishes and subscriptions fail with
   * DrainingError; it waits until every publish already issued has its
   * outcome, unsubscribes every subscription, then closes. With a signal
   * that aborts first, it closes at once and rejects with its reason.
   */
  async drain(signal) {
    if (this.state === State.CLOSED) throw this.closeErr ?? new ClosedError();
    this.state = State.DRAINING;
    try {
      await new Promise((resolve, reject) => {
        const check = () => {
          if (this.inflight === 0 && this.queued.length === 0) resolve();
          else this.idleWaiters.push(check);
        };
        signal?.addEventListener("abort", () => reject(abortReason(signal)), { once: true });
        check();
      });
      if (this.state === State.CLOSED) throw this.closeErr;
      await Promise.all([...this.subs].map((s) => s.unsubscribe(signal)));
    } finally {
      this.close();
    }
  }
  usable() {
    if (this.state === State.DRAINING) throw new DrainingError();
    if (this.state === State.CLOSED) throw this.closeErr ?? new ClosedError();
  }
  // -------------------------------------------------------------------------
  // Publishing
  /**
   * Publishes payload (bytes, or a string sent as UTF-8) to channel and
   * resolves to its position once the server acknowledged it. Rejects with
   * InvalidChannelError or PayloadTooLargeError (nothing sent), ServerError
   * (refused), ClosedError / DrainingError (nothing sent), or
   * UnknownOutcomeError (sent, but the acknowledgement was lost: the
   * message may or may not be stored; it is not sent again).
   */
  publish(channel, payload, opts = {}) {
    return this.enqueue(channel, payload, true, opts);
  }
  /**
   * Publishes without asking for an acknowledgement (at most once): it
   * resolves once the frame was handed to the WebSocket, and no error tells
   * of a message lost with the connection or refused by the server. While
   * 1 MiB or more waits in the socket, it waits for it to drain, so a
   * publisher faster than the network is slowed down, not buffered without
   * bound.
   */
  publishNoAck(channel, payload, opts = {}) {
    return this.enqueue(channel, payload, false, opts);
  }
  /** The channel name validated last and its bytes: a publisher repeating its channel checks it once. */
  lastChannel = "";
  lastChannelBytes = null;
  channelBytes(channel) {
    if (this.lastChannelBytes && channel === this.lastChannel) return this.lastChannelBytes;
    const b = validChannel(channel);
    this.lastChannel = channel;
    this.lastChannelBytes = b;
    return b;
  }
  enqueue(channel, payload, ack, opts) {
    const signal = opts.signal;
    let ch, pl;
    let ext = null;
    try {
      ch = this.channelBytes(channel);
      pl = toBytes(payload);
      ext = extOf(opts, this.opts.injectHeaders);
      this.usable();
      if (signal?.aborted) throw abortReason(signal);
    } catch (e) {
      return Promise.reject(e);
    }
    return new Promise((resolve, reject) => {
      const entry = { channel: ch, payload: pl, ext, ack, resolve, reject, signal };
      if (signal) {
        entry.onAbort = () => {
          const i = this.queued.indexOf(entry);
          if (i >= 0) {
            this.queued.splice(i, 1);
            entry.reject(abortReason(signal));
            this.notifyIdle();
          }
        };
        signal.addEventListener("abort", entry.onAbort, { once: true });
      }
      this.queued.push(entry);
      this.pump();
      if (this.queued.includes(entry) && entry.payload === payload) entry.payload = entry.payload.slice();
    });
  }
  rejectQueued(q, err) {
    if (q.signal && q.onAbort) q.signal.removeEventListener("abort", q.onAbort);
    q.reject(err);
  }
  /** Sends queued publishes, in order, while the window and the socket allow. */
  pump() {
    while (this.queued.length > 0) {
      const s = this.cur;
      if (!s || s.dead || s.goaway) return;
      const q = this.queued[0];
      if (q.ack && this.inflight >= this.opts.maxPending) return;
      if (!q.ack && s.bufferedAmount() >= NOACK_QUEUE_LIMIT) {
        if (!this.drainTimer) {
          this.drainTimer = setTimeout(() => {
            this.drainTimer = null;
            this.pump();
          }, DRAIN_POLL_MS);
        }
        return;
      }
      this.queued.shift();
      if (q.signal && q.onAbort) q.signal.removeEventListener("abort", q.onAbort);
      if (q.payload.length > s.welcome.maxPayload) {
        q.reject(new PayloadTooLargeError(`sluice: payload of ${q.payload.length} bytes, server max ${s.welcome.maxPayload}`));
        continue;
      }
      if (q.ext && (s.welcome.features & FEATURE_HEADERS) === 0) {
        q.reject(new InvalidOptionError("sluice: this server does not accept message ids or headers (no FeatureHeaders)"));
        continue;
      }
      if (q.ack) {
        this.inflight++;
        s.sendPublish(q.channel, q.payload, q.ext, {
          resolve: q.resolve,
          reject: q.reject,
          signal: q.signal,
          settled: false
        });
      } else {
        s.send(encodePublish(this.nextReq(), 0, q.channel, q.payload, q.ext ?? void 0));
        q.resolve(void 0);
      }
    }
    this.notifyIdle();
  }
  /** @internal A publish got its outcome: its window slot is free. */
  released() {
    this.inflight--;
    this.pump();
    this.notifyIdle();
  }
  notifyIdle() {
    if (this.idleWaiters.length === 0 || this.inflight !== 0 || this.queued.length !== 0) return;
    for (const w of this.idleWaiters.splice(0)) w();
  }
  // -------------------------------------------------------------------------
  // Subscribing
  /**
   * Subscribes to channel and resolves once the server confirmed it. If the
   * connection drops before the answer, the SUBSCRIBE is sent again after
   * reconnecting. Read the events with `for await (const ev of sub)` or
   * pass onEvent. A refusal rejects with ServerError; InvalidChannelError,
   * InvalidOptionError, DrainingError and ClosedError mean nothing was sent,
   * as does FiltersUnsupportedError (a filter, and a server without filters).
   */
  async subscribe(channel, opts = {}) {
    validChannel(channel);
    const [kind, arg] = startOf(opts.start ?? "live");
    const buffer = opts.buffer ?? DEFAULT_SUB_BUFFER;
    if (!Number.isInteger(buffer) || buffer < 1) throw new InvalidOptionError(`sluice: buffer ${buffer} < 1`);
    this.usable();
    const filter = opts.filter;
    if (filter !== void 0) {
      const n = utf8(filter).length;
      if (n < 1 || n > MAX_FILTER_LEN) throw new InvalidOptionError(`sluice: filter of ${n} bytes (1..${MAX_FILTER_LEN})`);
      if (this.cur && (this.cur.welcome.features & FEATURE_FILTERS) === 0) {
        throw new FiltersUnsupportedError(this.cur.welcome.serverName, channel, filter);
      }
    }
    const sub = new Subscription(this, channel, kind, arg, buffer, opts.onEvent, opts.onEnd, subscribeFlags(opts), filter);
    this.subs.add(sub);
    if (this.cur) this.sendSubscribe(this.cur, sub);
    const signal = opts.signal;
    let onAbort;
    try {
      await Promise.race([
        sub.ready,
        new Promise((_, reject) => {
          if (!signal) return;
          onAbort = () => reject(abortReason(signal));
          if (signal.aborted) onAbort();
          else signal.addEventListener("abort", onAbort, { once: true });
        })
      ]);
    } catch (e) {
      void sub.unsubscribe();
      throw e;
    } finally {
      if (onAbort) signal.removeEventListener("abort", onAbort);
    }
    if (sub.error && !(sub.error instanceof UnsubscribedError)) throw sub.error;
    return sub;
  }
  /**
   * @internal Sends sub's SUBSCRIBE on s under a fresh wire id; a filtered
   * sub on a session without FeatureFilters ends with FiltersUnsupportedError
   * instead (it is never resumed without its filter).
   */
  sendSubscribe(s, sub) {
    if (sub.filter !== void 0 && (s.welcome.features & FEATURE_FILTERS) === 0) {
      this.opts.logger?.warn("sluice: filtered subscription ended: the server does not offer filters", sub.channel, s.welcome.serverName);
      sub.end(new FiltersUnsupportedError(s.welcome.serverName, sub.channel, sub.filter));
      return;
    }
    let kind = sub.startKind;
    let arg = sub.startArg;
    if (sub.cursor !== 0) {
      kind = StartKind.POSITION;
      arg = sub.cursor;
    }
    const want = kind === StartKind.POSITION ? arg : 0;
    let wireID;
    do {
      this.nextWireID = this.nextWireID + 1 >>> 0;
      wireID = this.nextWireID;
    } while (wireID === 0 || s.subs.has(wireID));
    if (sub.wireID !== 0 && sub.sess) sub.sess.subs.delete(sub.wireID);
    sub.wireID = wireID;
    sub.sess = s;
    const id = this.nextReq();
    const sb = { subID: wireID, start: kind, arg, epoch: sub.epoch, channel: sub.channel };
    const f = sub.filter !== void 0 ? encodeSubscribeFilter(id, sb, sub.filter) : encodeSubscribe(id, sb);
    s.control(id, { kind: "sub", sub, want, wireID }, withFlags(f, f[5] | sub.pflags));
    s.subs.set(wireID, sub);
  }
  /**
   * The channel's members and occupancy as the server sees them (in a
   * cluster, every node's members). Rejects with ServerError (FORBIDDEN
   * without the presence permission), with PresenceUnsupportedError from a
   * server without presence, and with DisconnectedError when the
   * connection is lost before the answer (the query is not resent).
   */
  presence(channel, opts = {}) {
    return this.query(channel, false, opts.signal);
  }
  /** The channel's occupancy: presence() without the members. */
  async occupancy(channel, opts = {}) {
    return (await this.query(channel, true, opts.signal)).occupancy;
  }
  async query(channel, countsOnly, signal) {
    validChannel(channel);
    this.usable();
    while (!this.cur) {
      await this.ready(signal);
      this.usable();
    }
    const s = this.cur;
    if ((s.welcome.features & FEATURE_PRESENCE) === 0) {
      throw new PresenceUnsupportedError(`sluice: server ${s.welcome.serverName} does not offer presence`);
    }
    return new Promise((resolve, reject) => {
      const id = this.nextReq();
      const onAbort = () => {
        s.reqs.delete(id);
        reject(abortReason(signal));
      };
      const reply = (st2, err) => {
        signal?.removeEventListener("abort", onAbort);
        if (err) reject(err);
        else resolve(st2);
      };
      if (signal?.aborted) return reject(abortReason(signal));
      signal?.addEventListener("abort", onAbort, { once: true });
      const st = { occupancy: { subscribers: 0, publishers: 0, members: 0 }, members: [], partial: false };
      s.control(id, { kind: "presence", st, reply }, encodePresence(id, channel, countsOnly));
    });
  }
  /** Resolves when a session is installed or the client closes (usable() then throws). */
  ready(signal) {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const onAbort = () => {
        this.installWaiters = this.installWaiters.filter((w) => w !== wake);
        reject(abortReason(signal));
      };
      const wake = () => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      this.installWaiters.push(wake);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
  /** Wakes the queries waiting for a session (install, finish). */
  wakeInstallWaiters() {
    const ws = this.installWaiters;
    this.installWaiters = [];
    for (const w of ws) w();
  }
  /** @internal */
  current() {
    return this.cur;
  }
  /** @internal */
  forget(sub) {
    this.subs.delete(sub);
  }
  /** @internal */
  has(sub) {
    return this.subs.has(sub);
  }
  /** @internal */
  retryDelay() {
    return this.backoff(1);
  }
};
function startOf(s) {
  if (s === "live") return [StartKind.LIVE, 0];
  if (s === "earliest") return [StartKind.EARLIEST, 0];
  if (typeof s === "object" && s !== null) {
    if ("position" in s) {
      return [StartKind.POSITION, wholeNumber("position", s.position, 1, " (positions start at 1)")];
    }
    if ("last" in s) return [StartKind.LAST, wholeNumber("last", s.last, 0, "")];
    if ("sinceMs" in s) {
      if (!(typeof s.sinceMs === "number" && s.sinceMs >= 0 && s.sinceMs <= MAX_U64_NUMBER)) {
        throw new InvalidOptionError(`sluice: sinceMs must be a number from 0 to 2^53-1, got ${show(s.sinceMs)}`);
      }
      return [StartKind.SINCE, Math.floor(s.sinceMs)];
    }
  }
  throw new InvalidOptionError(`sluice: invalid start ${JSON.stringify(s, (_, v) => typeof v === "bigint" ? `${v}n` : v)}`);
}
function wholeNumber(name, v, min, why) {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min) {
    throw new InvalidOptionError(`sluice: ${name} must be a whole number from ${min} to 2^53-1${why}, got ${show(v)}`);
  }
  return v;
}
function show(v) {
  return typeof v === "bigint" ? `${v}n (a bigint; positions are numbers)` : typeof v === "string" ? JSON.stringify(v) : String(v);
}
var Session = class {
  constructor(c, ws, url, welcome) {
    this.c = c;
    this.ws = ws;
    this.url = url;
    this.welcome = welcome;
    this.maxBody = Math.min(welcome.maxBody, c.opts.maxBody);
  }
  c;
  ws;
  url;
  welcome;
  dead = false;
  /** install() made it the client's session (it then reports its end). */
  installed = false;
  /** Why it died. */
  error = null;
  goaway = false;
  started = Date.now();
  pending = /* @__PURE__ */ new Map();
  reqs = /* @__PURE__ */ new Map();
  subs = /* @__PURE__ */ new Map();
  maxBody;
  pingsOut = 0;
  pingTimer = null;
  goawayTimer = null;
  refreshTimer = null;
  refreshID = 0;
  unsubWaiters = /* @__PURE__ */ new Set();
  /** Takes over the socket's events and starts pinging. */
  start() {
    this.ws.onmessage = (ev) => {
      if (this.dead) return;
      try {
        if (!(ev.data instanceof ArrayBuffer)) throw new ProtocolError("a text message (protocol frames travel as binary messages)");
        const f = decodeFrame(new Uint8Array(ev.data), this.maxBody);
        this.dispatch(f.header, f.body);
      } catch (e) {
        this.fail(e instanceof MalformedFrameError ? new ProtocolError(e.message, e) : e);
      }
    };
    this.ws.onclose = (ev) => this.fail(new DisconnectedError(`server closed the connection (code ${ev.code}${ev.reason ? ", " + ev.reason : ""})`));
    this.ws.onerror = () => {
    };
    const pi = this.welcome.pingIntervalMs;
    if (pi > 0) {
      this.pingTimer = setInterval(() => {
        if (this.pingsOut >= 2) {
          this.fail(new DisconnectedError(`ping timeout after ${2 * pi} ms`));
          return;
        }
        this.pingsOut++;
        this.send(encodePing(0));
      }, pi);
    }
  }
  bufferedAmount() {
    return this.ws.bufferedAmount;
  }
  send(frame2) {
    if (this.dead) return;
    try {
      this.ws.send(frame2);
    } catch (e) {
      this.fail(new DisconnectedError(`write: ${e instanceof Error ? e.message : e}`, e));
    }
  }
  sendPublish(channel, payload, ext, pe) {
    const id = this.c.nextReq();
    this.pending.set(id, pe);
    if (pe.signal) {
      pe.onAbort = () => this.settle(pe, null, new UnknownOutcomeError(abortReason(pe.signal)), false);
      pe.signal.addEventListener("abort", pe.onAbort, { once: true });
    }
    this.send(encodePublish(id, FLAG_ACK, channel, payload, ext ?? void 0));
  }
  /**
   * Reports a publish's outcome to its caller (once) and, when the server
   * answered (or the session died), frees its window slot. An aborted wait
   * settles the caller early but keeps the slot until the answer.
   */
  settle(pe, pos, err, answered) {
    if (!pe.settled) {
      pe.settled = true;
      if (pe.signal && pe.onAbort) pe.signal.removeEventListener("abort", pe.onAbort);
      if (err) pe.reject(err);
      else pe.resolve(pos);
    }
    if (answered) this.c.released();
  }
  control(id, e, frame2) {
    this.reqs.set(id, e);
    this.send(frame2);
  }
  /** Waits for an UNSUBSCRIBE's answer, or the session's end (which counts as done). */
  unsubscribe(wireID) {
    return new Promise((resolve) => {
      if (this.dead) return resolve(null);
      const id = this.c.nextReq();
      const reply = (err) => {
        this.unsubWaiters.delete(reply);
        resolve(err);
      };
      this.unsubWaiters.add(reply);
      this.subs.delete(wireID);
      this.control(id, { kind: "unsub", reply }, encodeUnsubscribe(id, wireID));
    });
  }
  /**
   * Ends the session (the first call wins): the socket closes, every
   * publish awaiting its acknowledgement rejects with UnknownOutcomeError,
   * and the client reconnects or closes.
   */
  fail(err) {
    if (this.dead) return;
    this.dead = true;
    this.error = err;
    if (this.pingTimer) clearInterval(this.pingTimer);
    if (this.goawayTimer) clearTimeout(this.goawayTimer);
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    this.ws.onmessage = this.ws.onclose = this.ws.onerror = null;
    try {
      this.ws.close();
    } catch {
    }
    const pend = [...this.pending.values()];
    this.pending.clear();
    for (const e of this.reqs.values()) {
      if (e.kind === "presence") e.reply?.(null, new DisconnectedError(`presence: ${err.message}`, err));
    }
    this.reqs.clear();
    this.subs.clear();
    for (const w of [...this.unsubWaiters]) w(null);
    const uerr = new UnknownOutcomeError(err);
    for (const pe of pend) this.settle(pe, null, uerr, true);
    this.c.sessionEnded(this, err);
  }
  dispatch(h, body) {
    switch (h.type) {
      case FrameType.PUBACK:
        for (const a of decodePubAck(body)) {
          const pe = this.pending.get(a.id);
          if (pe) {
            this.pending.delete(a.id);
            this.settle(pe, a.position, null, true);
          }
        }
        return;
      case FrameType.DATA: {
        const d = decodeData(body);
        if (d.first === 0) throw new ProtocolError("DATA at position 0, which no message has");
        this.subs.get(h.id)?.onData(this, d.first, d.records);
        return;
      }
      case FrameType.FDATA: {
        if ((this.welcome.features & FEATURE_FILTERS) === 0) throw new ProtocolError("FDATA, but filters were not negotiated");
        this.subs.get(h.id)?.onFData(decodeFData(body));
        return;
      }
      case FrameType.AUTHED:
        if ((this.welcome.features & FEATURE_REFRESH) === 0) throw new ProtocolError("AUTHED, but REFRESH was not negotiated");
        this.onAuthed(h.id, decodeAuthed(body));
        return;
      case FrameType.GAP: {
        const g = decodeGap(body);
        if (g.from === 0) throw new ProtocolError(`GAP ${g.from}-${g.to} from position 0, which no message has`);
        this.subs.get(h.id)?.onGap(this, g);
        return;
      }
      case FrameType.SUBSCRIBED: {
        const info = decodeSubscribed(body);
        const e = this.reqs.get(h.id);
        if (!e) return;
        this.reqs.delete(h.id);
        if (e.kind !== "sub") throw new ProtocolError(`SUBSCRIBED answers request ${h.id}, which was no SUBSCRIBE`);
        if (info.subID !== e.wireID) throw new ProtocolError(`SUBSCRIBED for sub ${info.subID} answers SUBSCRIBE of sub ${e.wireID}`);
        if (this.subs.get(e.wireID) === e.sub) e.sub.onSubscribed(this, e.want, info);
        return;
      }
      case FrameType.UNSUBSCRIBED: {
        const subID = decodeUnsubscribed(body);
        if (h.id === 0) {
          const sub = this.subs.get(subID);
          this.subs.delete(subID);
          sub?.end(new ServerError("subscribe", CODE_FORBIDDEN, false, "the server ended the subscription: permission revoked"));
          return;
        }
        const e = this.reqs.get(h.id);
        this.reqs.delete(h.id);
        if (e?.kind === "unsub") e.reply?.(null);
        return;
      }
      case PresenceType.PRESENCE_STATE:
      case PresenceType.PRESENCE_EVENT:
      case PresenceType.OCCUPANCY:
        if ((this.welcome.features & FEATURE_PRESENCE) === 0) {
          throw new ProtocolError(`a presence frame (0x${h.type.toString(16)}), but presence was not negotiated`);
        }
        this.onPresence(h, body);
        return;
      case FrameType.PING:
        decodePing(body);
        this.send(encodePong(h.id));
        return;
      case FrameType.PONG:
        decodePong(body);
        this.pingsOut = 0;
        return;
      case FrameType.ERROR:
        this.onError(h.id, decodeError(h, body));
        return;
      case FrameType.GOAWAY: {
        const g = decodeGoAway(body);
        this.c.opts.logger?.info("sluice: server going away", this.url, codeName(g.code), g.text);
        this.goaway = true;
        this.c.detach(this);
        const cause = new ServerError("goaway", g.code, true, g.text);
        this.goawayTimer = setTimeout(() => this.fail(new DisconnectedError(cause.message, cause)), GOAWAY_GRACE_MS);
        return;
      }
      default:
        throw new ProtocolError(`unexpected ${typeName(h.type)} frame from server`);
    }
  }
  /** Handles a presence frame: a query's answer, or a subscription's events and counts. */
  onPresence(h, body) {
    if (h.type === PresenceType.PRESENCE_STATE) {
      const { occupancy, members } = decodePresenceState(body);
      const e = this.reqs.get(h.id);
      if (!e) return;
      if (e.kind !== "presence") throw new ProtocolError(`PRESENCE_STATE answers request ${h.id}, which was no PRESENCE`);
      e.st.occupancy = occupancy;
      e.st.partial = (h.flags & FLAG_PARTIAL) !== 0;
      e.st.members.push(...members);
      if ((h.flags & FLAG_MORE) !== 0) return;
      this.reqs.delete(h.id);
      sortMembers(e.st.members);
      if (e.sync) e.sync.onSynced(h.id, e.st);
      else e.reply?.(e.st, null);
      return;
    }
    const sub = this.subs.get(h.id);
    if (h.type === PresenceType.PRESENCE_EVENT) {
      const changes = decodePresenceEvent(body);
      sub?.onPresenceEvent(changes);
      return;
    }
    const o = decodeOccupancy(body);
    sub?.onOccupancy(this, o, (h.flags & FLAG_EVENTS_PAUSED) !== 0);
  }
  /** @internal Sends the query whose answer starts sub's member set over. */
  syncMembers(sub) {
    const id = this.c.nextReq();
    sub.members_.started(id);
    const st = { occupancy: { subscribers: 0, publishers: 0, members: 0 }, members: [], partial: false };
    this.control(id, { kind: "presence", st, sync: sub }, encodePresence(id, sub.channel));
  }
  /**
   * Records the client id and, with a token provider, schedules the next
   * REFRESH at a random point between 80% and 90% of the token's life.
   */
  onAuthed(id, a) {
    this.c._clientId = a.clientId;
    if (id !== 0 && id === this.refreshID) {
      this.refreshID = 0;
      this.c._refreshes++;
    }
    if (a.expiresInMs <= 0 || !this.c.opts.tokenProvider) return;
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    const at = a.expiresInMs * (0.8 + this.c.opts.random() / 10);
    this.refreshTimer = setTimeout(() => void this.refresh(), at);
  }
  async refresh() {
    this.refreshTimer = null;
    let tok;
    try {
      tok = await this.c.helloToken();
    } catch (e) {
      this.c.opts.logger?.warn("sluice: token refresh failed; trying again", e.message);
      if (!this.dead) this.refreshTimer = setTimeout(() => void this.refresh(), 5e3);
      return;
    }
    if (this.dead) return;
    this.refreshID = this.c.nextReq();
    this.send(encodeRefresh(this.refreshID, tok));
  }
  /** Routes an ERROR to the request it answers; id 0 or a fatal code ends the session. */
  onError(id, e) {
    const fatal = codeFatal(e.code);
    if (id === 0) throw new ServerError("connection", e.code, e.retriable, e.text);
    const pe = this.pending.get(id);
    const re = this.reqs.get(id);
    if (pe) {
      this.pending.delete(id);
      const se = new ServerError("publish", e.code, e.retriable, e.text);
      this.settle(pe, null, e.code === CODE_OUTCOME_UNKNOWN ? new UnknownOutcomeError(se) : se, true);
    } else if (re) {
      this.reqs.delete(id);
      if (re.kind === "unsub") {
        re.reply?.(e.code === CODE_UNKNOWN_SUBSCRIPTION ? null : new ServerError("unsubscribe", e.code, e.retriable, e.text));
      } else if (re.kind === "presence") {
        if (re.sync) re.sync.members_.syncing = 0;
        re.reply?.(null, new ServerError("presence", e.code, e.retriable, e.text));
      } else if (this.subs.get(re.wireID) === re.sub) {
        this.subs.delete(re.wireID);
        re.sub.onSubscribeError(this, new ServerError("subscribe", e.code, e.retriable, e.text));
      }
    } else if (!fatal) {
      this.c.opts.logger?.warn("sluice: server error for unknown request", id, codeName(e.code), e.text);
    }
    if (fatal) throw new ServerError("connection", e.code, e.retriable, e.text);
  }
};
var Subscription = class {
  /** @internal */
  constructor(c, channel, startKind, startArg, buffer, onEvent, onEnd, pflags = 0, filter) {
    this.c = c;
    this.channel = channel;
    this.startKind = startKind;
    this.startArg = startArg;
    this.buffer = buffer;
    this.onEvent = onEvent;
    this.onEnd = onEnd;
    this.pflags = pflags;
    this.filter = filter;
    this.ready = new Promise((r) => this.resolveReady = r);
  }
  c;
  channel;
  startKind;
  startArg;
  buffer;
  onEvent;
  onEnd;
  pflags;
  filter;
  /** @internal */
  wireID = 0;
  /** @internal */
  sess = null;
  /** @internal */
  cursor = 0;
  // next position expected; 0 before the first SUBSCRIBED
  /** @internal */
  epoch = 0;
  // epoch of the last SUBSCRIBED; 0 = unknown
  /** @internal */
  paused = false;
  subscribed = false;
  _info = null;
  _error = null;
  queue = [];
  head = 0;
  waiter = null;
  retryTimer = null;
  /** @internal */
  ready;
  resolveReady;
  /** @internal The member set of a presenceEvents subscription. */
  members_ = new MemberSet();
  /**
   * The channel's members as this subscription knows them (presenceEvents):
   * the server's answer to a query made after each SUBSCRIBED, kept up to
   * date with the joins and leaves since, sorted by client id, node and
   * connection. complete is false until that answer came, while the
   * channel's events are paused (client.presence() still answers), and when
   * the answer was partial.
   */
  members() {
    return this.members_.snapshot();
  }
  /** The values of the latest SUBSCRIBED (updated on every resume). */
  get info() {
    return this._info;
  }
  /** Why the subscription ended, or null while it is live. */
  get error() {
    return this._error;
  }
  /** The position the next message should have (0 before the first SUBSCRIBED). */
  get nextPosition() {
    return this.cursor;
  }
  [Symbol.asyncIterator]() {
    return {
      next: () => this.next(),
      return: async () => {
        await this.unsubscribe();
        return { done: true, value: void 0 };
      }
    };
  }
  /** The next event; done after unsubscribe(); rejects with the error that ended it otherwise. */
  next() {
    if (this.onEvent) return Promise.reject(new InvalidOptionError("sluice: this subscription delivers to onEvent"));
    if (this.head < this.queue.length) {
      const ev = this.queue[this.head++];
      if (this.head > 1024 && this.head * 2 > this.queue.length) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      this.maybeResume();
      return Promise.resolve({ done: false, value: ev });
    }
    if (this._error) {
      if (this._error instanceof UnsubscribedError) return Promise.resolve({ done: true, value: void 0 });
      return Promise.reject(this._error);
    }
    if (this.waiter) return Promise.reject(new InvalidOptionError("sluice: next() called again before the previous one resolved"));
    return new Promise((resolve, reject) => this.waiter = { resolve, reject });
  }
  queued() {
    return this.queue.length - this.head;
  }
  /** A paused subscription resubscribes once half its queue was consumed. */
  maybeResume() {
    if (!this.paused || this._error || this.queued() > this.buffer / 2) return;
    this.paused = false;
    const s = this.c.current();
    if (s) this.c.sendSubscribe(s, this);
  }
  /**
   * Ends the subscription: no event is delivered after it returns (events
   * already queued stay readable), it is not resumed, and it waits for the
   * server's UNSUBSCRIBED (a lost connection counts as done). Idempotent.
   */
  async unsubscribe(signal) {
    if (!this.c.has(this)) return;
    this.c.forget(this);
    this.terminate(new UnsubscribedError());
    const s = this.sess;
    if (!s || s.dead || this.c.current() !== s || !s.subs.has(this.wireID)) return;
    const p = s.unsubscribe(this.wireID);
    const err = await (signal ? Promise.race([
      p,
      new Promise((resolve) => {
        if (signal.aborted) resolve(abortReason(signal));
        signal.addEventListener("abort", () => resolve(abortReason(signal)), { once: true });
      })
    ]) : p);
    if (err) throw err;
  }
  /** @internal Ends with err (the first call wins): delivery stops, waiters learn. */
  terminate(err) {
    if (this._error) return;
    this._error = err;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.resolveReady();
    const w = this.waiter;
    this.waiter = null;
    if (w) {
      if (err instanceof UnsubscribedError) w.resolve({ done: true, value: void 0 });
      else w.reject(err);
    }
    try {
      this.onEnd?.(err);
    } catch (e) {
      callbackThrew(this.c.opts.logger, "onEnd", e);
    }
  }
  /** @internal Removes the subscription from its client, so no reconnect resumes it, and ends it. */
  end(err) {
    this.c.forget(this);
    this.terminate(err);
  }
  /**
   * Hands ev to the application; false if it was not taken (the
   * subscription ended or is paused), in which case the cursor stays and a
   * resume asks for it again.
   */
  deliver(ev) {
    if (this._error || this.paused) return false;
    if (this.onEvent) {
      try {
        this.onEvent(ev);
      } catch (e) {
        callbackThrew(this.c.opts.logger, "onEvent", e);
      }
      return true;
    }
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = null;
      w.resolve({ done: false, value: ev });
      return true;
    }
    if (this.queued() >= this.buffer) {
      this.pause();
      return false;
    }
    this.queue.push(ev);
    return true;
  }
  /** Stops the server's flow for this subscription until the queue drains. */
  pause() {
    this.paused = true;
    const s = this.sess;
    if (s && !s.dead && s.subs.get(this.wireID) === this) void s.unsubscribe(this.wireID);
  }
  // The methods below run on a message of session s.
  /** @internal A presence sync query's answer. */
  onSynced(id, st) {
    if (this.members_.syncing === id) this.members_.answered(st.members, st.partial);
  }
  /** @internal Joins and leaves: delivered, and applied to the member set. */
  onPresenceEvent(changes) {
    if ((this.pflags & FLAG_PRESENCE_EVENTS) === 0) return;
    for (const c of changes) {
      this.members_.apply(c);
      if (!this.deliver({ kind: c.kind, channel: this.channel, member: c.member })) return;
    }
  }
  /** @internal The channel's counts; a pause makes the member set stale, the resume syncs it. */
  onOccupancy(s, o, paused) {
    if ((this.pflags & (FLAG_PRESENCE_EVENTS | FLAG_OCCUPANCY)) === 0) return;
    if ((this.pflags & FLAG_PRESENCE_EVENTS) !== 0 && this.members_.pause(paused)) s.syncMembers(this);
    this.deliver({ kind: "occupancy", channel: this.channel, occupancy: o, eventsPaused: paused });
  }
  /**
   * @internal Applies a SUBSCRIBED (see client/subscribe.go onSubscribed):
   * an epoch change is an epoch event and delivery restarts at position 1,
   * where every incarnation numbers from (PROTOCOL.md 5), with a lost gap
   * for what of the new incarnation is gone (up to first; the server's own
   * GAP for it is then already covered); a later first than asked is an
   * expired gap.
   */
  onSubscribed(s, want, info) {
    if ((this.pflags & FLAG_PRESENCE_EVENTS) !== 0 && (s.welcome.features & FEATURE_PRESENCE) !== 0) {
      s.syncMembers(this);
    }
    this._info = { first: info.first, earliest: info.earliest, next: info.next, epoch: info.epoch };
    const prevEpoch = this.epoch;
    this.subscribed = true;
    this.resolveReady();
    if (prevEpoch !== 0 && info.epoch !== prevEpoch) {
      if (!this.deliver({ kind: "epoch", channel: this.channel, epoch: info.epoch, position: 1 })) return;
      this.epoch = info.epoch;
      this.cursor = 1;
      if (info.first > 1) this.emitGap({ from: 1, to: info.first - 1, reason: GapReason.LOST });
      return;
    }
    this.epoch = info.epoch;
    if (want !== 0 && info.first > want) {
      if (this.cursor === 0) this.cursor = want;
      this.emitGap({ from: want, to: info.first - 1, reason: GapReason.EXPIRED });
      return;
    }
    if (this.cursor === 0) this.cursor = info.first > want ? info.first : want;
  }
  /** @internal A refused SUBSCRIBE: a first one fails subscribe(); a resume is retried if retriable. */
  onSubscribeError(s, err) {
    if (this.subscribed && err.retriable) {
      const d = this.c.retryDelay();
      this.c.opts.logger?.warn("sluice: resubscribe refused, retrying", this.channel, d, err.message);
      this.retryTimer = setTimeout(() => {
        this.retryTimer = null;
        if (this.c.has(this) && this.c.current() === s && !this.paused) this.c.sendSubscribe(s, this);
      }, d);
      return;
    }
    this.end(err);
  }
  /** @internal Delivers a DATA frame's messages; duplicates dropped, a hole before first is a gap (lost). */
  onData(_s, first, records) {
    let pos = first;
    for (const r of records) {
      const cur = this.cursor;
      if (cur !== 0 && pos < cur) {
        pos++;
        continue;
      }
      if (cur !== 0 && pos > cur) {
        if (!this.emitGap({ from: cur, to: pos - 1, reason: GapReason.LOST })) return;
      }
      const ev = {
        kind: "message",
        channel: this.channel,
        position: pos,
        payload: r.payload.slice(),
        msgId: r.msgId ? r.msgId.slice() : null,
        headers: r.headers
      };
      if (!this.deliver(ev)) return;
      this.cursor = pos + 1;
      pos++;
    }
  }
  /** @internal Delivers an FDATA frame's messages; duplicates dropped, holes are no gaps. */
  onFData(recs) {
    for (const r of recs) {
      if (this.cursor !== 0 && r.position < this.cursor) continue;
      const ev = {
        kind: "message",
        channel: this.channel,
        position: r.position,
        payload: r.payload.slice(),
        msgId: r.msgId ? r.msgId.slice() : null,
        headers: r.headers
      };
      if (!this.deliver(ev)) return;
      this.cursor = r.position + 1;
    }
  }
  /** @internal Delivers a GAP, trimmed to the positions not yet delivered. */
  onGap(_s, g) {
    const cur = this.cursor;
    if (cur !== 0) {
      if (g.to < cur) return;
      if (g.from > cur && this.filter === void 0) {
        if (!this.emitGap({ from: cur, to: g.from - 1, reason: GapReason.LOST })) return;
      }
      if (g.from < cur) g = { ...g, from: cur };
    }
    this.emitGap(g);
  }
  emitGap(g) {
    if (!this.deliver({ kind: "gap", channel: this.channel, from: g.from, to: g.to, reason: gapReasonName(g.reason) })) {
      return false;
    }
    this.cursor = g.to + 1;
    return true;
  }
};
export {
  Client,
  ClosedError,
  DEFAULT_BACKOFF_MAX_MS,
  DEFAULT_BACKOFF_MIN_MS,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_MAX_BODY,
  DEFAULT_MAX_PENDING,
  DEFAULT_NAME,
  DEFAULT_SUB_BUFFER,
  DisconnectedError,
  DrainingError,
  FiltersUnsupportedError,
  InvalidChannelError,
  InvalidHeadersError,
  InvalidOptionError,
  MalformedFrameError,
  PayloadTooLargeError,
  PresenceUnsupportedError,
  ProtocolError,
  ServerError,
  SluiceError,
  Subscription,
  UnknownOutcomeError,
  UnsubscribedError,
  codec_exports as codec,
  connect,
  features_exports as features,
  presence_exports as presence
};
