// @sluice-rtm/client: the TypeScript SDK of Sluice, for browsers and Node.js.
export {
  connect,
  Client,
  Subscription,
  DEFAULT_NAME,
  DEFAULT_BACKOFF_MIN_MS,
  DEFAULT_BACKOFF_MAX_MS,
  DEFAULT_MAX_PENDING,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_SUB_BUFFER,
  DEFAULT_MAX_BODY,
} from "./client.js";
export type {
  ConnectOptions,
  Logger,
  StateEvent,
  Start,
  SubscribeOptions,
  PublishOptions,
  MessageEvent,
  GapEvent,
  EpochEvent,
  SubEvent,
  SubInfo,
  PresenceEvent,
  OccupancyEvent,
  PresenceState,
} from "./client.js";
export type { Member, Occupancy } from "./presence.js";
export * as presence from "./presence.js";
export * from "./errors.js";
export { InvalidChannelError, InvalidHeadersError, MalformedFrameError } from "./codec.js";
export type { HeaderField } from "./codec.js";
export * as codec from "./codec.js";
export * as features from "./features.js";
export type { WebSocketConstructor, WebSocketLike } from "./ws.js";
