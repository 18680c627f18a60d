// The client: one logical connection to a Sluice server (or cluster) over
// WebSocket, re-established automatically, with acknowledged and
// fire-and-forget publishing and resumable subscriptions. It mirrors the Go
// SDK (client/): the same guarantees, in JavaScript's single-threaded terms.

import * as codec from "./codec.js";
import {
  ClosedError,
  DisconnectedError,
  DrainingError,
  FiltersUnsupportedError,
  InvalidOptionError,
  PayloadTooLargeError,
  PresenceUnsupportedError,
  ProtocolError,
  ServerError,
  SluiceError,
  UnknownOutcomeError,
  UnsubscribedError,
} from "./errors.js";
import * as pres from "./presence.js";
import { resolveWebSocket, SUBPROTOCOL, type WebSocketConstructor, type WebSocketLike } from "./ws.js";
import * as feat from "./features.js";

export const DEFAULT_NAME = "sluice-js";
export const DEFAULT_BACKOFF_MIN_MS = 100;
export const DEFAULT_BACKOFF_MAX_MS = 10_000;
export const DEFAULT_MAX_PENDING = 1024;
export const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
export const DEFAULT_SUB_BUFFER = 1024;
export const DEFAULT_MAX_BODY = 64 << 20;
/** The body limit before WELCOME (which a server keeps within 8 KiB). */
const HANDSHAKE_MAX_BODY = 1 << 20;
/** How long a connection must have lasted for the backoff to start over. */
const HEALTHY_SESSION_MS = 1_000;
/** How long the client keeps reading after GOAWAY to collect acks. */
const GOAWAY_GRACE_MS = 2_000;
/** Output waiting in the socket at which fire-and-forget publishes wait. */
const NOACK_QUEUE_LIMIT = 1 << 20;
/** How often a publish waiting for the socket to drain looks again. */
const DRAIN_POLL_MS = 5;
/**
 * The features offered in HELLO: message ids and headers, credentials that
 * expire (AUTHED, REFRESH) and filters. (Not S2: a browser has no S2
 * codec, and payloads then always travel as they are.)
 */
const OFFERED_FEATURES = codec.FEATURE_HEADERS | codec.FEATURE_REFRESH | codec.FEATURE_FILTERS | pres.FEATURE_PRESENCE;
/** Handshakes in a row refused as UNAUTHENTICATED that end reconnecting. */
const MAX_AUTH_REFUSALS = 2;

/** Options of connect(). */
export interface ConnectOptions {
  /** Authentication token sent in HELLO (at most 4096 bytes). */
  token?: string | Uint8Array;
  /**
   * Gets the token instead of `token`: called before every connection
   * attempt, and on an open connection when 80% to 90% of the token's
   * lifetime (as the server announced it) has passed; the fresh token is
   * sent in a REFRESH without interrupting anything (docs/auth.md). A
   * provider that throws fails that connection attempt, or on refresh is
   * asked again after a while.
   */
  tokenProvider?: () => Promise<string | Uint8Array> | string | Uint8Array;
  /** Client name sent in HELLO (at most 255 bytes); default "sluice-js". */
  name?: string;
  /**
   * The WebSocket constructor. Default: the global WebSocket (browsers,
   * Node 22+), else the `ws` package (Node 20).
   */
  WebSocket?: WebSocketConstructor;
  /** Reconnect after a lost connection (default true). */
  reconnect?: boolean;
  /** Reconnect backoff: attempt n waits uniformly in [0, min(max, min*2^n)) ms. */
  backoffMinMs?: number;
  backoffMaxMs?: number;
  /** Publishes awaiting their acknowledgement at once (default 1024); more wait. */
  maxPending?: number;
  /** Bound on one connection attempt, WebSocket opening and handshake (default 5 s). */
  connectTimeoutMs?: number;
  /** Largest frame body accepted from the server (default 64 MiB; the smaller of this and WELCOME's maxBody applies). */
  maxBody?: number;
  /** Called on every change of the connection's state. */
  onState?: (ev: StateEvent) => void;
  /** Receives diagnostics (default: none). */
  logger?: Logger;
  /** The random source of the backoff jitter, in [0, 1) (default Math.random). */
  random?: () => number;
  /**
   * Headers to add to every publish, asked for when publish() or
   * publishNoAck() is called (synchronously, so it sees the caller's
   * active context): how a trace context travels to the subscribers.
   * `@sluice-rtm/client/otel` makes one from OpenTelemetry's propagation
   * API (`otelTracing()`). Default: none (one check per publish).
   */
  injectHeaders?: () => Array<[string, string]>;
}

export interface Logger {
  info(msg: string, ...args: unknown[]): void;
  warn(msg: string, ...args: unknown[]): void;
}

/** A change of the connection's state. */
export type StateEvent =
  | { state: "connected"; url: string; serverName: string }
  | { state: "disconnected"; url: string; error: Error }
  | { state: "closed"; error: Error };

/**
 * Where a subscription starts (PROTOCOL.md 2.5): at the live edge, at the
 * oldest retained message, at a position (a channel's positions count from
 * 1 within its epoch), n messages back, or sinceMs milliseconds back.
 * Numbers are whole and at most 2^53-1.
 */
export type Start =
  | "live"
  | "earliest"
  | { position: number }
  | { last: number }
  | { sinceMs: number };

/** Options of subscribe(). */
export interface SubscribeOptions {
  /** Where to start; default "live". */
  start?: Start;
  /**
   * Called with every event, in order, instead of queueing it for the async
   * iterator. It runs inside the WebSocket's message handler: keep it quick.
   */
  onEvent?: (ev: SubEvent) => void;
  /** Called once when the subscription ends, with why. */
  onEnd?: (err: Error) => void;
  /**
   * Events queued for the iterator before the subscription pauses (default
   * 1024). A paused subscription stops reading, unsubscribes on the server
   * and, once half its queue was consumed, resubscribes from the position
   * after the last event queued: the server's retained history is the
   * buffer, so a slow reader costs no memory here and misses nothing that
   * is still retained (what expired meanwhile comes as a gap).
   */
  buffer?: number;
  /** Aborts waiting for the first SUBSCRIBED. */
  signal?: AbortSignal;
  /**
   * Enter the channel's presence while subscribed: others see this
   * connection as a member, with the client id and info of its token
   * (docs/presence.md). A channel at the server's member limit refuses
   * the subscription (ServerError UNAVAILABLE).
   */
  presence?: boolean;
  /** Deliver the channel's joins and leaves ("join", "leave" events) and keep its member set (sub.members()). */
  presenceEvents?: boolean;
  /** Deliver the channel's counts ("occupancy" events): at once, then when they change. */
  occupancy?: boolean;
  /**
   * A CEL expression over the message's `headers` and JSON `payload`: only
   * the messages for which it is true are delivered, at their channel
   * positions (holes are not gaps). docs/filters.md.
   */
  filter?: string;
}

export interface PublishOptions {
  /**
   * A message id (1..255 bytes; a string is sent as UTF-8). The server
   * stores a message with an id it stored on the channel within its dedup
   * window only once and acknowledges the repeat with the first one's
   * position: after an UnknownOutcomeError, publishing again with the same
   * id is safe.
   */
  msgId?: string | Uint8Array;
  /** Headers (e.g. traceparent, content-type): an object or [key, value] pairs; keys may repeat in pairs. */
  headers?: Record<string, string> | Array<[string, string]>;
  /**
   * Aborts the publish: before it was sent it is not sent and the promise
   * rejects with the signal's reason; after, the promise rejects with an
   * UnknownOutcomeError (the message may have been stored).
   */
  signal?: AbortSignal;
}

/** A message of a subscription. */
export interface MessageEvent {
  kind: "message";
  channel: string;
  /** Its position: from 1 within the channel's epoch, one more than the previous message's. */
  position: number;
  payload: Uint8Array;
  /** The publisher's message id, or null. */
  msgId: Uint8Array | null;
  /** The message's headers, in the publisher's order (empty when none; do not modify). */
  headers: codec.HeaderField[];
}

/** Positions from..to (inclusive) will never be delivered. */
export interface GapEvent {
  kind: "gap";
  channel: string;
  from: number;
  to: number;
  reason: codec.GapReasonName;
}

/**
 * On resuming, the server reported another epoch for the channel: it is a
 * new incarnation (the channel was dropped after idling and used again, or
 * a single node restarted, PROTOCOL.md 5), whose positions count from 1
 * again. Delivery restarts at position, which is 1; a following gap
 * (reason lost) covers what of the new incarnation is no longer retained.
 */
export interface EpochEvent {
  kind: "epoch";
  channel: string;
  epoch: number;
  position: number;
}

/** A member joined or left the channel's presence (presenceEvents). Carries no position. */
export interface PresenceEvent {
  kind: "join" | "leave";
  channel: string;
  member: pres.Member;
}

/**
 * The channel's counts (occupancy; for presenceEvents also when eventsPaused
 * changes): while eventsPaused the channel has more members than the server
 * sends joins and leaves for.
 */
export interface OccupancyEvent {
  kind: "occupancy";
  channel: string;
  occupancy: pres.Occupancy;
  eventsPaused: boolean;
}

export type SubEvent = MessageEvent | GapEvent | EpochEvent | PresenceEvent | OccupancyEvent;

/** The answer of client.presence(). */
export interface PresenceState {
  occupancy: pres.Occupancy;
  /** Sorted by client id, node and connection; empty for occupancy(). */
  members: pres.Member[];
  /** The answering node holds fewer members than the channel has; the counts are exact. */
  partial: boolean;
}

/** The values of the latest SUBSCRIBED. */
export interface SubInfo {
  first: number;
  earliest: number;
  next: number;
  epoch: number;
}

type Payload = Uint8Array | ArrayBuffer | string;

interface Queued {
  channel: Uint8Array;
  payload: Uint8Array;
  ext: codec.Ext | null;
  ack: boolean;
  resolve(v: unknown): void;
  reject(e: unknown): void;
  signal?: AbortSignal;
  onAbort?: () => void;
}

interface Pending {
  resolve(pos: number): void;
  reject(e: unknown): void;
  signal?: AbortSignal;
  onAbort?: () => void;
  settled: boolean;
}

type ReqEntry =
  | { kind: "sub"; sub: Subscription; want: number; wireID: number }
  | { kind: "unsub"; reply?: (err: Error | null) => void }
  | { kind: "presence"; st: PresenceState; reply?: (st: PresenceState | null, err: Error | null) => void; sync?: Subscription };

const State = { OPEN: 0, DRAINING: 1, CLOSED: 2 } as const;

function toBytes(p: Payload): Uint8Array {
  if (typeof p === "string") return codec.utf8(p);
  if (p instanceof Uint8Array) return p;
  if (p instanceof ArrayBuffer) return new Uint8Array(p);
  throw new InvalidOptionError("sluice: payload must be a string, Uint8Array or ArrayBuffer");
}

/**
 * Reports an exception thrown by an application callback without letting it
 * break the connection: to the logger if there is one, else as an uncaught
 * error where the platform has reportError (browsers), else console.error.
 */
function callbackThrew(logger: Logger | undefined, what: string, e: unknown) {
  if (logger) return logger.warn(`sluice: ${what} callback threw`, e);
  const g = globalThis as { reportError?: (e: unknown) => void };
  if (typeof g.reportError === "function") g.reportError(e);
  else console.error(`sluice: ${what} callback threw`, e);
}

/**
 * The message id and headers of publish options, with the injected ones
 * after the message's own, checked; null when there are none.
 */
function extOf(o: PublishOptions, inject?: () => Array<[string, string]>): codec.Ext | null {
  const injected = inject?.();
  if (o.msgId === undefined && o.headers === undefined && !injected?.length) return null;
  const msgId = o.msgId === undefined ? null : toBytes(o.msgId);
  let pairs = o.headers === undefined ? [] : Array.isArray(o.headers) ? o.headers : Object.entries(o.headers);
  if (injected?.length) pairs = [...pairs, ...injected];
  const ext: codec.Ext = { msgId, headers: pairs.map(([key, value]) => ({ key: String(key), value: String(value) })) };
  codec.checkExt(ext);
  return codec.hasExt(ext) ? ext : null;
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("aborted", "AbortError");
}

/**
 * Connects to the first reachable of urls (a list, or one string with
 * comma-separated URLs, "ws://host:port/" or "wss://..."), performs the
 * HELLO/WELCOME handshake and returns the Client. A refusal by the server
 * rejects with a ServerError. Later losses are handled by reconnecting
 * (unless reconnect is false), over the same list in turn.
 */
export async function connect(urls: string | string[], opts: ConnectOptions = {}): Promise<Client> {
  const list = (Array.isArray(urls) ? urls : urls.split(","))
    .map((u) => u.trim())
    .filter((u, i, a) => u !== "" && a.indexOf(u) === i);
  if (list.length === 0) throw new InvalidOptionError(`sluice: no URL in ${JSON.stringify(urls)}`);
  const o = checkOptions(opts);
  const WS = await resolveWebSocket(opts.WebSocket, o.maxBody + codec.HEADER_LEN);
  const c = new Client(list, o, WS);
  const errs: unknown[] = [];
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
    `could not connect to ${list.join(", ")}: ${errs.map((e) => (e instanceof Error ? e.message : String(e))).join("; ")}`,
    errs.length === 1 ? errs[0] : new AggregateError(errs),
  );
}

interface Opts {
  token: Uint8Array;
  tokenProvider?: () => Promise<string | Uint8Array> | string | Uint8Array;
  name: string;
  reconnect: boolean;
  backoffMinMs: number;
  backoffMaxMs: number;
  maxPending: number;
  connectTimeoutMs: number;
  maxBody: number;
  onState?: (ev: StateEvent) => void;
  logger?: Logger;
  random: () => number;
  injectHeaders?: () => Array<[string, string]>;
}

function checkOptions(o: ConnectOptions): Opts {
  const token = o.token === undefined ? new Uint8Array(0) : toBytes(o.token);
  if (token.length > codec.MAX_TOKEN_LEN) {
    throw new InvalidOptionError(`sluice: token is ${token.length} bytes, at most ${codec.MAX_TOKEN_LEN}`);
  }
  const name = o.name ?? DEFAULT_NAME;
  if (codec.utf8(name).length > codec.MAX_NAME_LEN) {
    throw new InvalidOptionError(`sluice: name is longer than ${codec.MAX_NAME_LEN} bytes`);
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
  if (!(maxBody >= codec.MIN_MAX_BODY)) throw new InvalidOptionError(`sluice: maxBody ${maxBody} < ${codec.MIN_MAX_BODY}`);
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
    injectHeaders: o.injectHeaders,
  };
}

/**
 * A connection to Sluice. All methods may be called at any time; publishes
 * and subscriptions issued while reconnecting wait for the next connection.
 *
 * Publishing: publish() resolves to the message's position once the server
 * acknowledged it. Publishes are pipelined: call it many times without
 * awaiting; at most maxPending await acknowledgement at once and later ones
 * wait their turn, in call order. An acknowledged publish is never sent
 * twice: if the connection is lost before its acknowledgement, it rejects
 * with UnknownOutcomeError and the application decides whether to publish
 * again. publishNoAck() asks for no acknowledgement (at most once).
 *
 * Reconnecting: after a lost connection or a GOAWAY, the client opens the
 * next URL of its list after a backoff with full jitter and resumes every
 * subscription from the position after the last event it delivered, with
 * the epoch it saw: a missing range is a gap event, a changed epoch an
 * epoch event, and duplicates are dropped. Two handshakes in a row refused
 * as UNAUTHENTICATED end the reconnecting: the client closes with that
 * ServerError.
 */
export class Client {
  /** @internal */ urlIdx = 0;
  private state: number = State.OPEN;
  private cur: Session | null = null;
  /** Sessions not yet dead: the current one, and one draining after GOAWAY. */
  private readonly live = new Set<Session>();
  private reqID = 0;
  private nextWireID = 0;
  private closeErr: Error | null = null;
  private readonly subs = new Set<Subscription>();
  private readonly queued: Queued[] = [];
  private inflight = 0;
  private drainTimer: ReturnType<typeof setTimeout> | null = null;
  private reconnecting = false;
  private backoffTimer: ReturnType<typeof setTimeout> | null = null;
  private backoffWake: (() => void) | null = null;
  private idleWaiters: Array<() => void> = [];
  /** Presence queries waiting for a session. */
  private installWaiters: Array<() => void> = [];
  private readonly closedPromise: Promise<void>;
  private resolveClosed!: () => void;

  /** @internal */
  constructor(
    private readonly urls: string[],
    /** @internal */ readonly opts: Opts,
    private readonly WS: WebSocketConstructor,
  ) {
    this.closedPromise = new Promise((r) => (this.resolveClosed = r));
  }

  /** The parameters of the current connection's WELCOME; null while disconnected. */
  get welcome(): codec.Welcome | null {
    return this.cur?.welcome ?? null;
  }

  /** The URL of the current connection; null while disconnected. */
  get url(): string | null {
    return this.cur?.url ?? null;
  }

  /** Whether a connection is established now. */
  get connected(): boolean {
    return this.cur !== null;
  }

  /** Why the client closed, or null while it is open. */
  get error(): Error | null {
    return this.state === State.CLOSED ? this.closeErr : null;
  }

  /** Resolves when the client has closed for good. */
  get closed(): Promise<void> {
    return this.closedPromise;
  }

  /** @internal */
  nextReq(): number {
    this.reqID = (this.reqID + 1) >>> 0;
    if (this.reqID === 0) this.reqID = 1;
    return this.reqID;
  }

  private backoff(n: number): number {
    let d = this.opts.backoffMinMs;
    for (let i = 0; i < Math.min(n, 62) && d < this.opts.backoffMaxMs; i++) d *= 2;
    d = Math.min(d, this.opts.backoffMaxMs);
    return Math.floor(this.opts.random() * d) + 1;
  }

  private emit(ev: StateEvent) {
    try {
      this.opts.onState?.(ev);
    } catch (e) {
      callbackThrew(this.opts.logger, "onState", e);
    }
  }

  // -------------------------------------------------------------------------
  // Connecting

  /** The id the server knows this client by (a JWT's sub), from its last AUTHED; "" when none. */
  get clientId(): string {
    return this._clientId;
  }

  /** How many REFRESHes the server accepted. */
  get tokenRefreshes(): number {
    return this._refreshes;
  }

  /** @internal */ _clientId = "";
  /** @internal */ _refreshes = 0;

  /** @internal The token for the next HELLO or REFRESH. */
  async helloToken(): Promise<Uint8Array> {
    if (!this.opts.tokenProvider) return this.opts.token;
    const tok = toBytes(await this.opts.tokenProvider());
    if (tok.length > codec.MAX_TOKEN_LEN) {
      throw new InvalidOptionError(`sluice: the token provider returned ${tok.length} bytes, at most ${codec.MAX_TOKEN_LEN}`);
    }
    return tok;
  }

  /** @internal Gets the token, opens url and performs the handshake; resolves to a live session. */
  async dial(url: string): Promise<Session> {
    let token: Uint8Array;
    try {
      token = await this.helloToken();
    } catch (e) {
      throw new DisconnectedError(`token provider: ${e instanceof Error ? e.message : e}`, e);
    }
    return this.open(url, token);
  }

  private open(url: string, token: Uint8Array): Promise<Session> {
    return new Promise<Session>((resolve, reject) => {
      let ws: WebSocketLike;
      try {
        ws = new this.WS(url, [SUBPROTOCOL]);
      } catch (e) {
        reject(new DisconnectedError(`cannot open ${url}: ${e instanceof Error ? e.message : e}`, e));
        return;
      }
      ws.binaryType = "arraybuffer";
      const helloID = this.nextReq();
      let settled = false;
      const finish = (err: Error | null, s?: Session) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (err) {
          ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
          try {
            ws.close();
          } catch {
            /* already closing */
          }
          reject(err);
        } else resolve(s!);
      };
      const timer = setTimeout(
        () => finish(new DisconnectedError(`handshake with ${url} timed out after ${this.opts.connectTimeoutMs} ms`)),
        this.opts.connectTimeoutMs,
      );
      ws.onopen = () => {
        ws.send(
          codec.encodeHello(helloID, {
            minVersion: codec.VERSION_1,
            maxVersion: codec.VERSION_1,
            features: OFFERED_FEATURES,
            name: this.opts.name,
            token,
          }),
        );
      };
      ws.onerror = () => {
        /* the close event follows with the details a browser gives */
      };
      ws.onclose = (ev) => finish(new DisconnectedError(`${url} closed during the handshake (code ${ev.code}${ev.reason ? ", " + ev.reason : ""})`));
      ws.onmessage = (ev) => {
        let w: codec.Welcome;
        try {
          w = this.handshake(ev.data, helloID);
        } catch (e) {
          finish(e as Error);
          return;
        }
        // The session takes the socket's events over at once: a frame or
        // the close that follows WELCOME in the same turn is not missed.
        const s = new Session(this, ws, url, w);
        this.live.add(s);
        s.start();
        finish(null, s);
      };
    });
  }

  /** Checks the server's answer to HELLO: WELCOME, or an ERROR to throw. */
  private handshake(data: unknown, helloID: number): codec.Welcome {
    if (!(data instanceof ArrayBuffer)) throw new ProtocolError("a text message instead of WELCOME");
    let f: codec.Frame;
    try {
      f = codec.decodeFrame(new Uint8Array(data), Math.min(HANDSHAKE_MAX_BODY, this.opts.maxBody));
      if (f.header.type === codec.FrameType.ERROR) {
        const e = codec.decodeError(f.header, f.body);
        throw new ServerError("hello", e.code, e.retriable, e.text);
      }
      if (f.header.type !== codec.FrameType.WELCOME) {
        throw new ProtocolError(`${codec.typeName(f.header.type)} instead of WELCOME`);
      }
      const w = codec.decodeWelcome(f.body);
      if (f.header.id !== helloID) throw new ProtocolError(`WELCOME id ${f.header.id}, HELLO id ${helloID}`);
      if (w.version !== codec.VERSION_1) throw new ProtocolError(`WELCOME chose version ${w.version}, offered 1..1`);
      if (w.maxBody < codec.MIN_MAX_BODY) throw new ProtocolError(`WELCOME maxBody ${w.maxBody} < ${codec.MIN_MAX_BODY}`);
      if ((w.features & ~OFFERED_FEATURES) !== 0) {
        throw new ProtocolError(`WELCOME accepted features 0x${(w.features & ~OFFERED_FEATURES).toString(16)} that were not offered`);
      }
      return w;
    } catch (e) {
      if (e instanceof codec.MalformedFrameError) throw new ProtocolError(e.message, e);
      throw e;
    }
  }

  /** @internal Makes s the current session and resubscribes everything on it. */
  install(s: Session): boolean {
    if (this.state === State.CLOSED) {
      s.fail(new ClosedError());
      return false;
    }
    if (s.dead) return false; // lost between its WELCOME and now
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
  sessionEnded(s: Session, err: Error) {
    this.live.delete(s);
    if (this.cur === s) this.cur = null;
    if (this.state === State.CLOSED || !s.installed) return; // not installed: its dialer handles it
    this.emit({ state: "disconnected", url: s.url, error: err });
    if (!this.opts.reconnect) {
      this.finish(new ClosedError(err));
      return;
    }
    this.opts.logger?.warn("sluice: disconnected", s.url, err.message);
    void this.reconnect(Date.now() - s.started >= HEALTHY_SESSION_MS);
  }

  /** @internal A session stops taking requests (GOAWAY): new ones wait for the next. */
  detach(s: Session) {
    if (this.cur === s) this.cur = null;
  }

  private attempt = 0;

  private async reconnect(healthy: boolean) {
    if (this.reconnecting) return;
    this.reconnecting = true;
    if (healthy) this.attempt = 0;
    let refused = 0;
    try {
      while (this.state !== State.CLOSED) {
        await new Promise<void>((r) => {
          this.backoffWake = r;
          this.backoffTimer = setTimeout(r, this.backoff(this.attempt));
        });
        this.backoffTimer = null;
        this.backoffWake = null;
        if (this.state === State.CLOSED) return;
        this.attempt++;
        this.urlIdx = (this.urlIdx + 1) % this.urls.length;
        const url = this.urls[this.urlIdx];
        let s: Session;
        try {
          s = await this.dial(url);
        } catch (e) {
          this.opts.logger?.warn("sluice: reconnect failed", url, this.attempt, (e as Error).message);
          if (e instanceof ServerError && e.code === codec.CODE_UNAUTHENTICATED) {
            if (++refused >= MAX_AUTH_REFUSALS) {
              this.finish(new ClosedError(e));
              return;
            }
          } else refused = 0;
          continue;
        }
        if (this.install(s)) return;
        // Lost right after its handshake (or the client closed): try again.
      }
    } finally {
      this.reconnecting = false;
    }
  }

  /** Ends the client for good with cause. */
  private finish(cause: Error) {
    if (this.state !== State.CLOSED) {
      this.state = State.CLOSED;
      this.closeErr = cause;
    }
    if (this.backoffTimer) clearTimeout(this.backoffTimer);
    this.backoffWake?.();
    if (this.drainTimer) clearTimeout(this.drainTimer);
    const err = this.closeErr!;
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
  close(): void {
    if (this.state === State.CLOSED) return;
    this.finish(new ClosedError());
  }

  /**
   * Closes gracefully: new publishes and subscriptions fail with
   * DrainingError; it waits until every publish already issued has its
   * outcome, unsubscribes every subscription, then closes. With a signal
   * that aborts first, it closes at once and rejects with its reason.
   */
  async drain(signal?: AbortSignal): Promise<void> {
    if (this.state === State.CLOSED) throw this.closeErr ?? new ClosedError();
    this.state = State.DRAINING;
    try {
      await new Promise<void>((resolve, reject) => {
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

  private usable() {
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
  publish(channel: string, payload: Payload, opts: PublishOptions = {}): Promise<number> {
    return this.enqueue(channel, payload, true, opts) as Promise<number>;
  }

  /**
   * Publishes without asking for an acknowledgement (at most once): it
   * resolves once the frame was handed to the WebSocket, and no error tells
   * of a message lost with the connection or refused by the server. While
   * 1 MiB or more waits in the socket, it waits for it to drain, so a
   * publisher faster than the network is slowed down, not buffered without
   * bound.
   */
  publishNoAck(channel: string, payload: Payload, opts: PublishOptions = {}): Promise<void> {
    return this.enqueue(channel, payload, false, opts) as Promise<void>;
  }

  /** The channel name validated last and its bytes: a publisher repeating its channel checks it once. */
  private lastChannel = "";
  private lastChannelBytes: Uint8Array | null = null;

  private channelBytes(channel: string): Uint8Array {
    if (this.lastChannelBytes && channel === this.lastChannel) return this.lastChannelBytes;
    const b = codec.validChannel(channel);
    this.lastChannel = channel;
    this.lastChannelBytes = b;
    return b;
  }

  private enqueue(channel: string, payload: Payload, ack: boolean, opts: PublishOptions): Promise<unknown> {
    const signal = opts.signal;
    let ch: Uint8Array, pl: Uint8Array;
    let ext: codec.Ext | null = null;
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
      const entry: Queued = { channel: ch, payload: pl, ext, ack, resolve, reject, signal };
      if (signal) {
        entry.onAbort = () => {
          const i = this.queued.indexOf(entry);
          if (i >= 0) {
            // Not sent yet: it never will be.
            this.queued.splice(i, 1);
            entry.reject(abortReason(signal));
            this.notifyIdle();
          }
        };
        signal.addEventListener("abort", entry.onAbort, { once: true });
      }
      this.queued.push(entry);
      this.pump();
      // One that has to wait keeps its own copy: the caller may reuse its buffer.
      if (this.queued.includes(entry) && entry.payload === payload) entry.payload = entry.payload.slice();
    });
  }

  private rejectQueued(q: Queued, err: unknown) {
    if (q.signal && q.onAbort) q.signal.removeEventListener("abort", q.onAbort);
    q.reject(err);
  }

  /** Sends queued publishes, in order, while the window and the socket allow. */
  private pump() {
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
      if (q.ext && (s.welcome.features & codec.FEATURE_HEADERS) === 0) {
        q.reject(new InvalidOptionError("sluice: this server does not accept message ids or headers (no FeatureHeaders)"));
        continue;
      }
      if (q.ack) {
        this.inflight++;
        s.sendPublish(q.channel, q.payload, q.ext, {
          resolve: q.resolve as (pos: number) => void,
          reject: q.reject,
          signal: q.signal,
          settled: false,
        });
      } else {
        s.send(codec.encodePublish(this.nextReq(), 0, q.channel, q.payload, q.ext ?? undefined));
        q.resolve(undefined);
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

  private notifyIdle() {
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
  async subscribe(channel: string, opts: SubscribeOptions = {}): Promise<Subscription> {
    codec.validChannel(channel);
    const [kind, arg] = startOf(opts.start ?? "live");
    const buffer = opts.buffer ?? DEFAULT_SUB_BUFFER;
    if (!Number.isInteger(buffer) || buffer < 1) throw new InvalidOptionError(`sluice: buffer ${buffer} < 1`);
    this.usable();
    const filter = opts.filter;
    if (filter !== undefined) {
      const n = codec.utf8(filter).length;
      if (n < 1 || n > feat.MAX_FILTER_LEN) throw new InvalidOptionError(`sluice: filter of ${n} bytes (1..${feat.MAX_FILTER_LEN})`);
      if (this.cur && (this.cur.welcome.features & codec.FEATURE_FILTERS) === 0) {
        throw new FiltersUnsupportedError(this.cur.welcome.serverName, channel, filter);
      }
    }
    const sub = new Subscription(this, channel, kind, arg, buffer, opts.onEvent, opts.onEnd, pres.subscribeFlags(opts), filter);
    this.subs.add(sub);
    if (this.cur) this.sendSubscribe(this.cur, sub);
    // Otherwise install() sends it once connected.
    const signal = opts.signal;
    let onAbort: (() => void) | undefined;
    try {
      await Promise.race([
        sub.ready,
        new Promise<never>((_, reject) => {
          if (!signal) return;
          onAbort = () => reject(abortReason(signal));
          if (signal.aborted) onAbort();
          else signal.addEventListener("abort", onAbort, { once: true });
        }),
      ]);
    } catch (e) {
      void sub.unsubscribe();
      throw e;
    } finally {
      if (onAbort) signal!.removeEventListener("abort", onAbort);
    }
    if (sub.error && !(sub.error instanceof UnsubscribedError)) throw sub.error;
    return sub;
  }

  /**
   * @internal Sends sub's SUBSCRIBE on s under a fresh wire id; a filtered
   * sub on a session without FeatureFilters ends with FiltersUnsupportedError
   * instead (it is never resumed without its filter).
   */
  sendSubscribe(s: Session, sub: Subscription) {
    if (sub.filter !== undefined && (s.welcome.features & codec.FEATURE_FILTERS) === 0) {
      this.opts.logger?.warn("sluice: filtered subscription ended: the server does not offer filters", sub.channel, s.welcome.serverName);
      sub.end(new FiltersUnsupportedError(s.welcome.serverName, sub.channel, sub.filter));
      return;
    }
    let kind = sub.startKind;
    let arg = sub.startArg;
    if (sub.cursor !== 0) {
      kind = codec.StartKind.POSITION;
      arg = sub.cursor;
    }
    const want = kind === codec.StartKind.POSITION ? arg : 0;
    let wireID: number;
    do {
      this.nextWireID = (this.nextWireID + 1) >>> 0;
      wireID = this.nextWireID;
    } while (wireID === 0 || s.subs.has(wireID));
    if (sub.wireID !== 0 && sub.sess) sub.sess.subs.delete(sub.wireID);
    sub.wireID = wireID;
    sub.sess = s;
    const id = this.nextReq();
    const sb = { subID: wireID, start: kind, arg, epoch: sub.epoch, channel: sub.channel };
    const f = sub.filter !== undefined ? feat.encodeSubscribeFilter(id, sb, sub.filter) : codec.encodeSubscribe(id, sb);
    s.control(id, { kind: "sub", sub, want, wireID }, pres.withFlags(f, f[5] | sub.pflags));
    s.subs.set(wireID, sub);
  }

  /**
   * The channel's members and occupancy as the server sees them (in a
   * cluster, every node's members). Rejects with ServerError (FORBIDDEN
   * without the presence permission), with PresenceUnsupportedError from a
   * server without presence, and with DisconnectedError when the
   * connection is lost before the answer (the query is not resent).
   */
  presence(channel: string, opts: { signal?: AbortSignal } = {}): Promise<PresenceState> {
    return this.query(channel, false, opts.signal);
  }

  /** The channel's occupancy: presence() without the members. */
  async occupancy(channel: string, opts: { signal?: AbortSignal } = {}): Promise<pres.Occupancy> {
    return (await this.query(channel, true, opts.signal)).occupancy;
  }

  private async query(channel: string, countsOnly: boolean, signal?: AbortSignal): Promise<PresenceState> {
    codec.validChannel(channel);
    this.usable();
    while (!this.cur) {
      await this.ready(signal);
      this.usable();
    }
    const s = this.cur;
    if ((s.welcome.features & pres.FEATURE_PRESENCE) === 0) {
      throw new PresenceUnsupportedError(`sluice: server ${s.welcome.serverName} does not offer presence`);
    }
    return new Promise((resolve, reject) => {
      const id = this.nextReq();
      const onAbort = () => {
        s.reqs.delete(id);
        reject(abortReason(signal!));
      };
      const reply = (st: PresenceState | null, err: Error | null) => {
        signal?.removeEventListener("abort", onAbort);
        if (err) reject(err);
        else resolve(st!);
      };
      if (signal?.aborted) return reject(abortReason(signal));
      signal?.addEventListener("abort", onAbort, { once: true });
      const st: PresenceState = { occupancy: { subscribers: 0, publishers: 0, members: 0 }, members: [], partial: false };
      s.control(id, { kind: "presence", st, reply }, pres.encodePresence(id, channel, countsOnly));
    });
  }

  /** Resolves when a session is installed or the client closes (usable() then throws). */
  private ready(signal?: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const onAbort = () => {
        this.installWaiters = this.installWaiters.filter((w) => w !== wake);
        reject(abortReason(signal!));
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
  private wakeInstallWaiters() {
    const ws = this.installWaiters;
    this.installWaiters = [];
    for (const w of ws) w();
  }

  /** @internal */
  current(): Session | null {
    return this.cur;
  }

  /** @internal */
  forget(sub: Subscription) {
    this.subs.delete(sub);
  }

  /** @internal */
  has(sub: Subscription): boolean {
    return this.subs.has(sub);
  }

  /** @internal */
  retryDelay(): number {
    return this.backoff(1);
  }
}

function startOf(s: Start): [number, number] {
  if (s === "live") return [codec.StartKind.LIVE, 0];
  if (s === "earliest") return [codec.StartKind.EARLIEST, 0];
  if (typeof s === "object" && s !== null) {
    if ("position" in s) {
      return [codec.StartKind.POSITION, wholeNumber("position", s.position, 1, " (positions start at 1)")];
    }
    if ("last" in s) return [codec.StartKind.LAST, wholeNumber("last", s.last, 0, "")];
    if ("sinceMs" in s) {
      if (!(typeof s.sinceMs === "number" && s.sinceMs >= 0 && s.sinceMs <= codec.MAX_U64_NUMBER)) {
        throw new InvalidOptionError(`sluice: sinceMs must be a number from 0 to 2^53-1, got ${show(s.sinceMs)}`);
      }
      return [codec.StartKind.SINCE, Math.floor(s.sinceMs)];
    }
  }
  throw new InvalidOptionError(`sluice: invalid start ${JSON.stringify(s, (_, v) => (typeof v === "bigint" ? `${v}n` : v))}`);
}

/** v if it is a whole number from min to 2^53-1; InvalidOptionError otherwise (a bigint included). */
function wholeNumber(name: string, v: unknown, min: number, why: string): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min) {
    throw new InvalidOptionError(`sluice: ${name} must be a whole number from ${min} to 2^53-1${why}, got ${show(v)}`);
  }
  return v;
}

function show(v: unknown): string {
  return typeof v === "bigint" ? `${v}n (a bigint; positions are numbers)` : typeof v === "string" ? JSON.stringify(v) : String(v);
}

/**
 * One WebSocket's lifetime: the requests awaiting an answer and the routing
 * of DATA and GAP. A session never comes back to life: after fail() the
 * client makes a new one.
 */
/** @internal */
export class Session {
  dead = false;
  /** install() made it the client's session (it then reports its end). */
  installed = false;
  /** Why it died. */
  error: Error | null = null;
  goaway = false;
  readonly started = Date.now();
  readonly pending = new Map<number, Pending>();
  readonly reqs = new Map<number, ReqEntry>();
  readonly subs = new Map<number, Subscription>();
  private readonly maxBody: number;
  private pingsOut = 0;
  private pingTimer: ReturnType<typeof setInterval> | null = null;
  private goawayTimer: ReturnType<typeof setTimeout> | null = null;
  private refreshTimer: ReturnType<typeof setTimeout> | null = null;
  private refreshID = 0;
  private readonly unsubWaiters = new Set<(err: Error | null) => void>();

  constructor(
    readonly c: Client,
    readonly ws: WebSocketLike,
    readonly url: string,
    readonly welcome: codec.Welcome,
  ) {
    this.maxBody = Math.min(welcome.maxBody, c.opts.maxBody);
  }

  /** Takes over the socket's events and starts pinging. */
  start() {
    this.ws.onmessage = (ev) => {
      if (this.dead) return;
      try {
        if (!(ev.data instanceof ArrayBuffer)) throw new ProtocolError("a text message (protocol frames travel as binary messages)");
        const f = codec.decodeFrame(new Uint8Array(ev.data), this.maxBody);
        this.dispatch(f.header, f.body);
      } catch (e) {
        this.fail(e instanceof codec.MalformedFrameError ? new ProtocolError(e.message, e) : (e as Error));
      }
    };
    this.ws.onclose = (ev) =>
      this.fail(new DisconnectedError(`server closed the connection (code ${ev.code}${ev.reason ? ", " + ev.reason : ""})`));
    this.ws.onerror = () => {
      /* the close event follows */
    };
    const pi = this.welcome.pingIntervalMs;
    if (pi > 0) {
      this.pingTimer = setInterval(() => {
        if (this.pingsOut >= 2) {
          this.fail(new DisconnectedError(`ping timeout after ${2 * pi} ms`));
          return;
        }
        this.pingsOut++;
        this.send(codec.encodePing(0));
      }, pi);
    }
  }

  bufferedAmount(): number {
    return this.ws.bufferedAmount;
  }

  send(frame: Uint8Array) {
    if (this.dead) return;
    try {
      this.ws.send(frame);
    } catch (e) {
      this.fail(new DisconnectedError(`write: ${e instanceof Error ? e.message : e}`, e));
    }
  }

  sendPublish(channel: Uint8Array, payload: Uint8Array, ext: codec.Ext | null, pe: Pending) {
    const id = this.c.nextReq();
    this.pending.set(id, pe);
    if (pe.signal) {
      pe.onAbort = () => this.settle(pe, null, new UnknownOutcomeError(abortReason(pe.signal!)), false);
      pe.signal.addEventListener("abort", pe.onAbort, { once: true });
    }
    this.send(codec.encodePublish(id, codec.FLAG_ACK, channel, payload, ext ?? undefined));
  }

  /**
   * Reports a publish's outcome to its caller (once) and, when the server
   * answered (or the session died), frees its window slot. An aborted wait
   * settles the caller early but keeps the slot until the answer.
   */
  private settle(pe: Pending, pos: number | null, err: Error | null, answered: boolean) {
    if (!pe.settled) {
      pe.settled = true;
      if (pe.signal && pe.onAbort) pe.signal.removeEventListener("abort", pe.onAbort);
      if (err) pe.reject(err);
      else pe.resolve(pos!);
    }
    if (answered) this.c.released();
  }

  control(id: number, e: ReqEntry, frame: Uint8Array) {
    this.reqs.set(id, e);
    this.send(frame);
  }

  /** Waits for an UNSUBSCRIBE's answer, or the session's end (which counts as done). */
  unsubscribe(wireID: number): Promise<Error | null> {
    return new Promise((resolve) => {
      if (this.dead) return resolve(null);
      const id = this.c.nextReq();
      const reply = (err: Error | null) => {
        this.unsubWaiters.delete(reply);
        resolve(err);
      };
      this.unsubWaiters.add(reply);
      this.subs.delete(wireID);
      this.control(id, { kind: "unsub", reply }, codec.encodeUnsubscribe(id, wireID));
    });
  }

  /**
   * Ends the session (the first call wins): the socket closes, every
   * publish awaiting its acknowledgement rejects with UnknownOutcomeError,
   * and the client reconnects or closes.
   */
  fail(err: Error) {
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
      /* already closed */
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

  private dispatch(h: codec.Header, body: Uint8Array) {
    switch (h.type) {
      case codec.FrameType.PUBACK:
        for (const a of codec.decodePubAck(body)) {
          const pe = this.pending.get(a.id);
          if (pe) {
            // An ack for an unknown id (e.g. one already failed) is ignored.
            this.pending.delete(a.id);
            this.settle(pe, a.position, null, true);
          }
        }
        return;
      case codec.FrameType.DATA: {
        const d = codec.decodeData(body); // positions past 2^53-1 are malformed
        if (d.first === 0) throw new ProtocolError("DATA at position 0, which no message has");
        this.subs.get(h.id)?.onData(this, d.first, d.records);
        return;
      }
      case codec.FrameType.FDATA: {
        if ((this.welcome.features & codec.FEATURE_FILTERS) === 0) throw new ProtocolError("FDATA, but filters were not negotiated");
        this.subs.get(h.id)?.onFData(feat.decodeFData(body));
        return;
      }
      case codec.FrameType.AUTHED:
        if ((this.welcome.features & codec.FEATURE_REFRESH) === 0) throw new ProtocolError("AUTHED, but REFRESH was not negotiated");
        this.onAuthed(h.id, feat.decodeAuthed(body));
        return;
      case codec.FrameType.GAP: {
        const g = codec.decodeGap(body);
        if (g.from === 0) throw new ProtocolError(`GAP ${g.from}-${g.to} from position 0, which no message has`);
        this.subs.get(h.id)?.onGap(this, g);
        return;
      }
      case codec.FrameType.SUBSCRIBED: {
        const info = codec.decodeSubscribed(body);
        const e = this.reqs.get(h.id);
        if (!e) return; // the answer to a SUBSCRIBE abandoned meanwhile
        this.reqs.delete(h.id);
        if (e.kind !== "sub") throw new ProtocolError(`SUBSCRIBED answers request ${h.id}, which was no SUBSCRIBE`);
        if (info.subID !== e.wireID) throw new ProtocolError(`SUBSCRIBED for sub ${info.subID} answers SUBSCRIBE of sub ${e.wireID}`);
        if (this.subs.get(e.wireID) === e.sub) e.sub.onSubscribed(this, e.want, info);
        return;
      }
      case codec.FrameType.UNSUBSCRIBED: {
        const subID = codec.decodeUnsubscribed(body);
        if (h.id === 0) {
          // The server ended the subscription: its permission was revoked (PROTOCOL.md 2.7).
          const sub = this.subs.get(subID);
          this.subs.delete(subID);
          sub?.end(new ServerError("subscribe", codec.CODE_FORBIDDEN, false, "the server ended the subscription: permission revoked"));
          return;
        }
        const e = this.reqs.get(h.id);
        this.reqs.delete(h.id);
        if (e?.kind === "unsub") e.reply?.(null);
        return;
      }
      case pres.PresenceType.PRESENCE_STATE:
      case pres.PresenceType.PRESENCE_EVENT:
      case pres.PresenceType.OCCUPANCY:
        if ((this.welcome.features & pres.FEATURE_PRESENCE) === 0) {
          throw new ProtocolError(`a presence frame (0x${h.type.toString(16)}), but presence was not negotiated`);
        }
        this.onPresence(h, body);
        return;
      case codec.FrameType.PING:
        codec.decodePing(body);
        this.send(codec.encodePong(h.id));
        return;
      case codec.FrameType.PONG:
        codec.decodePong(body);
        this.pingsOut = 0;
        return;
      case codec.FrameType.ERROR:
        this.onError(h.id, codec.decodeError(h, body));
        return;
      case codec.FrameType.GOAWAY: {
        const g = codec.decodeGoAway(body);
        this.c.opts.logger?.info("sluice: server going away", this.url, codec.codeName(g.code), g.text);
        this.goaway = true;
        this.c.detach(this);
        const cause = new ServerError("goaway", g.code, true, g.text);
        this.goawayTimer = setTimeout(() => this.fail(new DisconnectedError(cause.message, cause)), GOAWAY_GRACE_MS);
        return;
      }
      default:
        throw new ProtocolError(`unexpected ${codec.typeName(h.type)} frame from server`);
    }
  }

  /** Handles a presence frame: a query's answer, or a subscription's events and counts. */
  private onPresence(h: codec.Header, body: Uint8Array) {
    if (h.type === pres.PresenceType.PRESENCE_STATE) {
      const { occupancy, members } = pres.decodePresenceState(body);
      const e = this.reqs.get(h.id);
      if (!e) return; // a query abandoned by its caller
      if (e.kind !== "presence") throw new ProtocolError(`PRESENCE_STATE answers request ${h.id}, which was no PRESENCE`);
      e.st.occupancy = occupancy;
      e.st.partial = (h.flags & pres.FLAG_PARTIAL) !== 0;
      e.st.members.push(...members);
      if ((h.flags & pres.FLAG_MORE) !== 0) return;
      this.reqs.delete(h.id);
      pres.sortMembers(e.st.members);
      if (e.sync) e.sync.onSynced(h.id, e.st);
      else e.reply?.(e.st, null);
      return;
    }
    const sub = this.subs.get(h.id);
    if (h.type === pres.PresenceType.PRESENCE_EVENT) {
      const changes = pres.decodePresenceEvent(body);
      sub?.onPresenceEvent(changes);
      return;
    }
    const o = pres.decodeOccupancy(body);
    sub?.onOccupancy(this, o, (h.flags & pres.FLAG_EVENTS_PAUSED) !== 0);
  }

  /** @internal Sends the query whose answer starts sub's member set over. */
  syncMembers(sub: Subscription) {
    const id = this.c.nextReq();
    sub.members_.started(id);
    const st: PresenceState = { occupancy: { subscribers: 0, publishers: 0, members: 0 }, members: [], partial: false };
    this.control(id, { kind: "presence", st, sync: sub }, pres.encodePresence(id, sub.channel));
  }

  /**
   * Records the client id and, with a token provider, schedules the next
   * REFRESH at a random point between 80% and 90% of the token's life.
   */
  private onAuthed(id: number, a: feat.Authed) {
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

  private async refresh() {
    this.refreshTimer = null;
    let tok: Uint8Array;
    try {
      tok = await this.c.helloToken();
    } catch (e) {
      this.c.opts.logger?.warn("sluice: token refresh failed; trying again", (e as Error).message);
      if (!this.dead) this.refreshTimer = setTimeout(() => void this.refresh(), 5_000);
      return;
    }
    if (this.dead) return;
    this.refreshID = this.c.nextReq();
    this.send(feat.encodeRefresh(this.refreshID, tok));
  }

  /** Routes an ERROR to the request it answers; id 0 or a fatal code ends the session. */
  private onError(id: number, e: codec.ErrorFrame) {
    const fatal = codec.codeFatal(e.code);
    if (id === 0) throw new ServerError("connection", e.code, e.retriable, e.text);
    const pe = this.pending.get(id);
    const re = this.reqs.get(id);
    if (pe) {
      this.pending.delete(id);
      const se = new ServerError("publish", e.code, e.retriable, e.text);
      // OUTCOME_UNKNOWN: the message may be stored; every other refusal
      // means it was not (PROTOCOL.md 7.2).
      this.settle(pe, null, e.code === codec.CODE_OUTCOME_UNKNOWN ? new UnknownOutcomeError(se) : se, true);
    } else if (re) {
      this.reqs.delete(id);
      if (re.kind === "unsub") {
        // Already gone: the goal of UNSUBSCRIBE is met.
        re.reply?.(e.code === codec.CODE_UNKNOWN_SUBSCRIPTION ? null : new ServerError("unsubscribe", e.code, e.retriable, e.text));
      } else if (re.kind === "presence") {
        if (re.sync) re.sync.members_.syncing = 0;
        re.reply?.(null, new ServerError("presence", e.code, e.retriable, e.text));
      } else if (this.subs.get(re.wireID) === re.sub) {
        this.subs.delete(re.wireID);
        re.sub.onSubscribeError(this, new ServerError("subscribe", e.code, e.retriable, e.text));
      }
    } else if (!fatal) {
      this.c.opts.logger?.warn("sluice: server error for unknown request", id, codec.codeName(e.code), e.text);
    }
    if (fatal) throw new ServerError("connection", e.code, e.retriable, e.text);
  }
}

/**
 * A live subscription to one channel. Its events come in position order,
 * either to the onEvent callback or through async iteration
 * (`for await (const ev of sub)`, or `await sub.next()`); iteration ends
 * after unsubscribe() and throws the error that ended the subscription
 * otherwise (after the events queued before it).
 */
export class Subscription implements AsyncIterable<SubEvent> {
  /** @internal */ wireID = 0;
  /** @internal */ sess: Session | null = null;
  /** @internal */ cursor = 0; // next position expected; 0 before the first SUBSCRIBED
  /** @internal */ epoch = 0; // epoch of the last SUBSCRIBED; 0 = unknown
  /** @internal */ paused = false;
  private subscribed = false;
  private _info: SubInfo | null = null;
  private _error: Error | null = null;
  private readonly queue: SubEvent[] = [];
  private head = 0;
  private waiter: { resolve(r: IteratorResult<SubEvent>): void; reject(e: unknown): void } | null = null;
  private retryTimer: ReturnType<typeof setTimeout> | null = null;
  /** @internal */ readonly ready: Promise<void>;
  private resolveReady!: () => void;
  /** @internal The member set of a presenceEvents subscription. */
  readonly members_ = new pres.MemberSet();

  /** @internal */
  constructor(
    private readonly c: Client,
    readonly channel: string,
    /** @internal */ readonly startKind: number,
    /** @internal */ readonly startArg: number,
    private readonly buffer: number,
    private readonly onEvent?: (ev: SubEvent) => void,
    private readonly onEnd?: (err: Error) => void,
    /** @internal The presence flags of its SUBSCRIBEs. */ readonly pflags = 0,
    /** The filter expression, if any (docs/filters.md). */
    readonly filter?: string,
  ) {
    this.ready = new Promise((r) => (this.resolveReady = r));
  }

  /**
   * The channel's members as this subscription knows them (presenceEvents):
   * the server's answer to a query made after each SUBSCRIBED, kept up to
   * date with the joins and leaves since, sorted by client id, node and
   * connection. complete is false until that answer came, while the
   * channel's events are paused (client.presence() still answers), and when
   * the answer was partial.
   */
  members(): { members: pres.Member[]; complete: boolean } {
    return this.members_.snapshot();
  }

  /** The values of the latest SUBSCRIBED (updated on every resume). */
  get info(): SubInfo | null {
    return this._info;
  }

  /** Why the subscription ended, or null while it is live. */
  get error(): Error | null {
    return this._error;
  }

  /** The position the next message should have (0 before the first SUBSCRIBED). */
  get nextPosition(): number {
    return this.cursor;
  }

  [Symbol.asyncIterator](): AsyncIterator<SubEvent> {
    return {
      next: () => this.next(),
      return: async () => {
        await this.unsubscribe();
        return { done: true, value: undefined };
      },
    };
  }

  /** The next event; done after unsubscribe(); rejects with the error that ended it otherwise. */
  next(): Promise<IteratorResult<SubEvent>> {
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
      if (this._error instanceof UnsubscribedError) return Promise.resolve({ done: true, value: undefined });
      return Promise.reject(this._error);
    }
    if (this.waiter) return Promise.reject(new InvalidOptionError("sluice: next() called again before the previous one resolved"));
    return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
  }

  private queued(): number {
    return this.queue.length - this.head;
  }

  /** A paused subscription resubscribes once half its queue was consumed. */
  private maybeResume() {
    if (!this.paused || this._error || this.queued() > this.buffer / 2) return;
    this.paused = false;
    const s = this.c.current();
    if (s) this.c.sendSubscribe(s, this);
    // Otherwise install() resubscribes it.
  }

  /**
   * Ends the subscription: no event is delivered after it returns (events
   * already queued stay readable), it is not resumed, and it waits for the
   * server's UNSUBSCRIBED (a lost connection counts as done). Idempotent.
   */
  async unsubscribe(signal?: AbortSignal): Promise<void> {
    if (!this.c.has(this)) return;
    this.c.forget(this);
    this.terminate(new UnsubscribedError());
    const s = this.sess;
    if (!s || s.dead || this.c.current() !== s || !s.subs.has(this.wireID)) return;
    const p = s.unsubscribe(this.wireID);
    const err = await (signal
      ? Promise.race([
          p,
          new Promise<Error>((resolve) => {
            if (signal.aborted) resolve(abortReason(signal) as Error);
            signal.addEventListener("abort", () => resolve(abortReason(signal) as Error), { once: true });
          }),
        ])
      : p);
    if (err) throw err;
  }

  /** @internal Ends with err (the first call wins): delivery stops, waiters learn. */
  terminate(err: Error) {
    if (this._error) return;
    this._error = err;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.resolveReady();
    const w = this.waiter;
    this.waiter = null;
    if (w) {
      if (err instanceof UnsubscribedError) w.resolve({ done: true, value: undefined });
      else w.reject(err);
    }
    try {
      this.onEnd?.(err);
    } catch (e) {
      callbackThrew(this.c.opts.logger, "onEnd", e);
    }
  }

  /** @internal Removes the subscription from its client, so no reconnect resumes it, and ends it. */
  end(err: Error) {
    this.c.forget(this);
    this.terminate(err);
  }

  /**
   * Hands ev to the application; false if it was not taken (the
   * subscription ended or is paused), in which case the cursor stays and a
   * resume asks for it again.
   */
  private deliver(ev: SubEvent): boolean {
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
  private pause() {
    this.paused = true;
    const s = this.sess;
    if (s && !s.dead && s.subs.get(this.wireID) === this) void s.unsubscribe(this.wireID);
  }

  // The methods below run on a message of session s.

  /** @internal A presence sync query's answer. */
  onSynced(id: number, st: PresenceState) {
    if (this.members_.syncing === id) this.members_.answered(st.members, st.partial);
  }

  /** @internal Joins and leaves: delivered, and applied to the member set. */
  onPresenceEvent(changes: pres.PresenceChange[]) {
    if ((this.pflags & pres.FLAG_PRESENCE_EVENTS) === 0) return; // not asked for: dropped
    for (const c of changes) {
      this.members_.apply(c);
      if (!this.deliver({ kind: c.kind, channel: this.channel, member: c.member })) return;
    }
  }

  /** @internal The channel's counts; a pause makes the member set stale, the resume syncs it. */
  onOccupancy(s: Session, o: pres.Occupancy, paused: boolean) {
    if ((this.pflags & (pres.FLAG_PRESENCE_EVENTS | pres.FLAG_OCCUPANCY)) === 0) return;
    if ((this.pflags & pres.FLAG_PRESENCE_EVENTS) !== 0 && this.members_.pause(paused)) s.syncMembers(this);
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
  onSubscribed(s: Session, want: number, info: codec.Subscribed) {
    if ((this.pflags & pres.FLAG_PRESENCE_EVENTS) !== 0 && (s.welcome.features & pres.FEATURE_PRESENCE) !== 0) {
      s.syncMembers(this); // the member set starts over from the server's answer
    }
    this._info = { first: info.first, earliest: info.earliest, next: info.next, epoch: info.epoch };
    const prevEpoch = this.epoch;
    this.subscribed = true;
    this.resolveReady();
    if (prevEpoch !== 0 && info.epoch !== prevEpoch) {
      // Not taken (paused): the next resume sees the change again.
      if (!this.deliver({ kind: "epoch", channel: this.channel, epoch: info.epoch, position: 1 })) return;
      this.epoch = info.epoch;
      this.cursor = 1;
      if (info.first > 1) this.emitGap({ from: 1, to: info.first - 1, reason: codec.GapReason.LOST });
      return;
    }
    this.epoch = info.epoch;
    if (want !== 0 && info.first > want) {
      if (this.cursor === 0) this.cursor = want;
      // The server starts later than asked: the range before first is gone.
      this.emitGap({ from: want, to: info.first - 1, reason: codec.GapReason.EXPIRED });
      return;
    }
    if (this.cursor === 0) this.cursor = info.first > want ? info.first : want;
  }

  /** @internal A refused SUBSCRIBE: a first one fails subscribe(); a resume is retried if retriable. */
  onSubscribeError(s: Session, err: ServerError) {
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
  onData(_s: Session, first: number, records: codec.DataRecord[]) {
    let pos = first;
    for (const r of records) {
      const cur = this.cursor;
      if (cur !== 0 && pos < cur) {
        pos++;
        continue; // a duplicate of a delivered position
      }
      if (cur !== 0 && pos > cur) {
        if (!this.emitGap({ from: cur, to: pos - 1, reason: codec.GapReason.LOST })) return;
      }
      // Copy: the payload belongs to the application, not to the frame's buffer.
      const ev: MessageEvent = {
        kind: "message",
        channel: this.channel,
        position: pos,
        payload: r.payload.slice(),
        msgId: r.msgId ? r.msgId.slice() : null,
        headers: r.headers,
      };
      if (!this.deliver(ev)) return;
      this.cursor = pos + 1;
      pos++;
    }
  }

  /** @internal Delivers an FDATA frame's messages; duplicates dropped, holes are no gaps. */
  onFData(recs: feat.FRecord[]) {
    for (const r of recs) {
      if (this.cursor !== 0 && r.position < this.cursor) continue; // a duplicate of a delivered position
      const ev: MessageEvent = {
        kind: "message",
        channel: this.channel,
        position: r.position,
        payload: r.payload.slice(),
        msgId: r.msgId ? r.msgId.slice() : null,
        headers: r.headers,
      };
      if (!this.deliver(ev)) return;
      this.cursor = r.position + 1;
    }
  }

  /** @internal Delivers a GAP, trimmed to the positions not yet delivered. */
  onGap(_s: Session, g: codec.Gap) {
    const cur = this.cursor;
    if (cur !== 0) {
      if (g.to < cur) return;
      if (g.from > cur && this.filter === undefined) {
        // (a filtered subscription's holes are messages that did not match)
        if (!this.emitGap({ from: cur, to: g.from - 1, reason: codec.GapReason.LOST })) return;
      }
      if (g.from < cur) g = { ...g, from: cur };
    }
    this.emitGap(g);
  }

  private emitGap(g: codec.Gap): boolean {
    if (!this.deliver({ kind: "gap", channel: this.channel, from: g.from, to: g.to, reason: codec.gapReasonName(g.reason) })) {
      return false;
    }
    this.cursor = g.to + 1;
    return true;
  }
}
