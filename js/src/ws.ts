declare const process: { nextTick(fn: () => void): void };

// The WebSocket the SDK uses: the subset of the browser's WebSocket API that
// both browsers and the `ws` package of Node.js implement.

/** What the SDK needs of a WebSocket object. */
export interface WebSocketLike {
  binaryType: string;
  readonly bufferedAmount: number;
  readonly readyState: number;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
}

/** A constructor such as the browser's WebSocket or the `ws` package's. */
export type WebSocketConstructor = new (url: string, protocols?: string | string[]) => WebSocketLike;

/** The WebSocket subprotocol the SDK offers (PROTOCOL.md 10.1); a server may also select none. */
export const SUBPROTOCOL = "sluice.v1";

/**
 * Finds a WebSocket: the one given, else the global one (browsers, Deno,
 * Node 22+), else the optional `ws` package (Node 20), whose incoming
 * messages are then capped at maxMessage bytes before they are buffered.
 */
export async function resolveWebSocket(
  given: WebSocketConstructor | undefined,
  maxMessage: number,
): Promise<WebSocketConstructor> {
  if (given) return given;
  const g = (globalThis as { WebSocket?: unknown }).WebSocket;
  if (typeof g === "function") return g as WebSocketConstructor;
  let mod: { WebSocket?: unknown; default?: unknown };
  try {
    const name = "ws"; // a variable, so that bundlers for browsers leave it alone
    mod = await import(name);
  } catch (e) {
    throw new Error(
      "sluice: no WebSocket in this environment: install the `ws` package or pass the WebSocket option",
      { cause: e },
    );
  }
  const WS = (mod.WebSocket ?? mod.default) as new (url: string, protocols: unknown, opts: unknown) => WebSocketLike;
  type Corkable = { cork(): void; uncork(): void };
  return class extends (WS as unknown as new (...a: unknown[]) => { send(d: Uint8Array): void }) {
    private corked = false;
    constructor(url: string, protocols?: string | string[]) {
      super(url, protocols ?? [], { maxPayload: maxMessage });
    }
    // Every frame is its own WebSocket message, and `ws` writes each to the
    // socket at once: one system call per frame. Frames sent in one turn of
    // the event loop are corked into one write instead (a pipelined burst of
    // publishes, say); the socket is uncorked before any I/O happens.
    send(data: Uint8Array) {
      const sock = (this as unknown as { _socket?: Partial<Corkable> })._socket;
      if (!this.corked && sock && typeof sock.cork === "function" && typeof sock.uncork === "function") {
        this.corked = true;
        sock.cork();
        process.nextTick(() => {
          this.corked = false;
          (sock as Corkable).uncork();
        });
      }
      super.send(data);
    }
  } as unknown as WebSocketConstructor;
}
