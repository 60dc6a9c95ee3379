// @syncd/client: the browser SDK of syncd (docs/PROTOCOL.md).

export { Client, Backoff, OfflineError, SYNC_FAILURE_THRESHOLD, type ClientConfig, type ReadersPage } from "./client.js";
export { validId, validReaction, directConv } from "./ids.js";
export { messageChangeOf, type ClientEvents, type ClientEventName } from "./events.js";
export { IndexedDBStore, type IndexedDBStoreOptions } from "./idbstore.js";
export { MemoryStore, NotContiguousError, applyEntry, toMessage, reactionKey, raisePeak, zeroPeaks, hasSources, sourceStart, isFollowMark, type SourceMethods, type FollowMarks, type Store, type DeliveryState, type MessageStatus, type MarkPeak, type ConvPeaks, type MarkMove, type MarksChange, type UserMarks, type StoreInfo, type StoreSnapshot, type OutboxItem, type OutboxStatus, type Message, type MsgEffects, type ReactionMark, type StoredMsg, type StoredRange, type ViewTx } from "./store.js";
export { digestOf, digestRecord, digestEqual, DIGEST_LEN, type DigestFields } from "./digest.js";
export { DEFAULT_RETRY_MS } from "./outbox.js";
export { Code, ProtoError, codeName, codeKnown, retryable, errorFromClose } from "./codes.js";
export * from "./frames.js";
export { FrameReader, encodeFrame, FrameTooLargeError, FRAME_VERSION, HEADER_LEN, type ReadItem } from "./framing.js";
export { MalformedError } from "./msgpack.js";
export { realClock, type Clock, type TimerHandle } from "./clock.js";
export type { Logger } from "./session.js";
export { StreamError, closeInfoFromClose, type CloseInfo, type Connection, type Stream, type TransportKind } from "./transport/types.js";
export { WebSocketConnection, dialWebSocket, RecordKind, INITIAL_WINDOW, MAX_DATA, type WebSocketLike, type WebSocketDialOptions } from "./transport/websocket.js";
export { WebTransportConnection, dialWebTransport, webTransportAvailable, hashBytes, type WebTransportDialOptions } from "./transport/webtransport.js";
export { Connector, endpointOf, type Endpoint, type ConnectorOptions, type TransportChoice, type ChoiceReason } from "./transport/connect.js";
