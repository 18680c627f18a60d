// Errors of the SDK. Every error is a SluiceError; test the kind with
// instanceof. They mirror the sentinel errors of the Go SDK (client/errors.go).

import { codeName } from "./codec.js";

/** The base class of every error the SDK throws or rejects with. */
export class SluiceError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The client was closed (by close(), drain(), or a connection loss without reconnect). */
export class ClosedError extends SluiceError {
  constructor(cause?: unknown) {
    super(cause ? `sluice: connection closed: ${errText(cause)}` : "sluice: connection closed", { cause });
  }
}

/** drain() has started: no new publishes or subscriptions. */
export class DrainingError extends SluiceError {
  constructor() {
    super("sluice: connection draining");
  }
}

/**
 * A publish was sent (or may have been) but its acknowledgement never came:
 * the connection was lost, the client was closed, or the caller's signal
 * aborted the wait. The message may or may not have been stored. The SDK
 * never sends it again by itself; the application decides.
 */
export class UnknownOutcomeError extends SluiceError {
  constructor(cause?: unknown) {
    super(`sluice: publish outcome unknown${cause ? ": " + errText(cause) : ""}`, { cause });
  }
}

/** The connection to the server was lost. */
export class DisconnectedError extends SluiceError {
  constructor(why: string, cause?: unknown) {
    super(`sluice: disconnected: ${why}`, { cause });
  }
}

/** The server broke protocol v1; the connection was dropped. */
export class ProtocolError extends SluiceError {
  constructor(why: string, cause?: unknown) {
    super(`sluice: protocol violation by server: ${why}`, { cause });
  }
}

/** The payload is over the server's maxPayload; nothing was sent. */
export class PayloadTooLargeError extends SluiceError {}

/** An option has an invalid value; nothing was sent. */
export class InvalidOptionError extends SluiceError {}

/** The subscription was ended by unsubscribe(). */
export class UnsubscribedError extends SluiceError {
  constructor() {
    super("sluice: unsubscribed");
  }
}


/**
 * An ERROR (or GOAWAY) frame from the server. `code` is the protocol's
 * number (PROTOCOL.md 7.2), `codeName` its name, `op` what it answered:
 * "hello", "publish", "subscribe", "unsubscribe", "connection" or "goaway".
 */
export class ServerError extends SluiceError {
  readonly codeName: string;
  constructor(
    readonly op: string,
    readonly code: number,
    readonly retriable: boolean,
    readonly text: string,
  ) {
    super(`sluice: ${op}: ${codeName(code)}${text ? ": " + text : ""}`);
    this.codeName = codeName(code);
  }
}

function errText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** A presence query to a server without presence (PROTOCOL.md 2.18); nothing was sent. */
export class PresenceUnsupportedError extends SluiceError {}

/**
 * A subscription with a filter and a server without filters (PROTOCOL.md
 * 2.17): subscribe() rejects with it and sends nothing, and a filtered
 * subscription whose connection was re-established with such a server
 * (another URL of the list, a rolling upgrade or downgrade) ends with it
 * rather than resuming without its filter, which would deliver every
 * message of the channel. The client's other subscriptions resume.
 */
export class FiltersUnsupportedError extends SluiceError {
  constructor(
    readonly serverName: string,
    readonly channel: string,
    readonly filter: string,
  ) {
    super(`sluice: server ${serverName} does not offer filters: subscription to ${JSON.stringify(channel)} with filter ${JSON.stringify(filter)}`);
  }
}
