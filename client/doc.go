// Package client is the Go SDK of syncd: it connects a device to a syncd cluster over QUIC
// (ALPN "syncd/1"), sends the user's actions and keeps a local copy of the user's conversations
// in sync, following the client state machine of docs/PROTOCOL.md §8.
//
// # Durable outbox with bounded retries
//
// Every action of the app (a message, a read receipt, a recall, a group change) is first
// written to a durable outbox with a fresh client_msg_id and status "sending"; the call returns
// once it is on disk, so a message survives an app kill. While connected, the client sends each
// item with the same client_msg_id and payload until the server acknowledges it ("sent", with
// the server's msg_id and conv_seq) or gives up: retryable errors and timeouts are retried on a
// bounded schedule with jitter (about 1 s, 3 s, 7 s, 15 s, 30 s, never sooner than the server's
// retry-after), after which the item is "failed" and the user may resend it by hand with the
// same id. Items still sending are resumed after a restart. The server deduplicates by
// client_msg_id, so a resend never posts twice.
//
// # Cursor sync with gap detection
//
// The device follows its user log from a stored cursor (epoch, position). Batches must continue
// the cursor exactly; one that does not (a gap, another epoch) is not stored at all and the sync
// restarts from the stored cursor, so an entry is never skipped. Entries and the new cursor are
// written in one transaction before the cursor is acknowledged to the server. A device far
// behind is told to rebase (jump to the head and load conversation state instead of replaying),
// and an epoch change (a re-created log) resets the cursor while keeping the local history.
//
// # Local store
//
// One Pebble database per device holds the outbox, the cursor, the received entries and a
// per-conversation view for the app: messages in conv_seq order (recalls marked), read marks per
// member and member lists. Entries are deduplicated by msg_id, so an entry that arrives twice
// (through the sync stream and an ack, or replayed after an epoch change) appears once.
//
// # Limits and reconnecting
//
// The client keeps to the limits the server's Welcome announced: it reads frames up to
// max_frame, refuses a body above max_body when it is queued, fails a request whose frame would
// exceed max_frame without sending it (the server would have to reset the stream), and takes a
// sync stream without any frame for three heartbeat_ms intervals for dead. It paces its outbox
// with a token bucket of send_burst mutations refilled at send_rate_per_s, the server's own, so
// that rate_limited answers do not eat into a message's bounded retries, and sends its head
// check at least twice per request_idle_ms, so the server never closes its request stream as
// idle. It uses three streams (control, request, sync), within any max_streams. It reconnects on its
// own with a jittered backoff (500 ms doubling to 30 s, never less than a server's retry-after),
// trying the next node of Config.Addrs after a failed dial, and also when the node it is on
// cannot serve it: its sync stream has said Stale for Config.StaleFailover (the node is cut off
// from the log's shard leader), or it answered two sends in a row with unavailable. The backoff starts over only once a
// connection has stayed up for 10 s: a connection that fails sooner — its sync stream refused,
// a frame it cannot read — counts as a failed attempt, so a persistent failure is retried every
// 30 s, not in a loop.
//
// # Tokens
//
// The session runs under the device's token: the server closes the connection when it expires
// (token_expired). With Config.TokenSource the SDK gets a fresh token ahead of each expiry the
// server announces and presents it on the control stream (Refresh), so the connection outlives
// its tokens; it also fetches one before redialing when the token in hand was refused or is
// about to expire. Refusals of a connection carry their retry-after in the connection close,
// which the SDK reads even when the Error frame was lost, and waits out before redialing.
//
// # Events
//
// The client reports what happens — new entries, outbox status changes, gaps, rebases, epoch
// changes — on an event channel, so an app can update its UI without polling. It also says
// whether syncing works: SyncedEvent when the device has caught up with the server's head (as a
// Heartbeat proves it), StaleEvent when the node it is on cannot prove the head (show
// "connecting…"), SyncFailedEvent when SyncFailureThreshold attempts in a row made no progress (with the last
// error; repeated at each further failure until syncing works again).
package client
