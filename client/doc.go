// Package client is the Go SDK of syncd: it connects a device to a syncd cluster over QUIC
// (ALPN "syncd/1"), sends the user's actions and keeps a local copy of the user's conversations
// in sync, following the client state machine of docs/PROTOCOL.md §8.
//
// # Offline first
//
// Open opens the device's local store and returns without any connection: the app starts with
// what earlier runs stored (messages, conversations, members, read marks, the outbox), and the
// user's actions queue while the node is unreachable. The client connects in the background,
// with the reconnect backoff below, and sends what is queued once a node answers. ConnectedEvent
// and OfflineEvent tell the app when the connection comes and goes; the queries that only the
// server can answer (History, Conversations, FetchMembers) return ErrOffline at once meanwhile.
// Dial is Open for apps that want the first connection made before they go on: it fails when no
// node accepts the device.
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
// Each conversation's items are sent one at a time, in the order they were queued, so they
// reach the conversation in that order; different conversations are sent to in parallel (a
// few at once, pipelined on one stream), so an item waiting for its retry holds back only the
// items of its own conversation.
//
// # Cursor sync with gap detection
//
// The device follows its user log from a stored cursor (epoch, position). Batches must continue
// the cursor exactly; one that does not (a gap, another epoch) is not stored at all and the sync
// restarts from the stored cursor, so an entry is never skipped; the server is told (a Report,
// once per gap, not once per retry of it). Entries and the new cursor are written in one
// transaction before the cursor is acknowledged to the server.
//
// A device more than Config.Ceiling entries behind (10,000 by default), or whose cursor the
// server's retention has passed, is told to rebase instead of replaying: the client pages
// through the user's conversations, stores each one's state (members, the user's read mark) and,
// where the local copy is behind, its latest entries (Config.RebaseHistory), and only then moves
// the cursor to the head and syncs on from there (RebaseEvent); older history stays available
// through History. An epoch change (a re-created log) resets the cursor while keeping the local
// history.
//
// The server's heartbeats are checked too: one of another epoch restarts the stream (which the
// server then answers with the epoch change), and a head beyond the cursor that no batch reaches
// within two heartbeat intervals restarts it as stalled; streams that keep restarting without
// progress end the connection, which is then redialed with backoff.
//
// # Large groups: sources
//
// A group with more members than the server's large_group_threshold (1,000 by default) is not
// copied into its members' logs (PROTOCOL §6 "Sources", revision 6): the device follows its
// conversation log directly, as a source of the same sync stream, with a cursor of its own
// (the conversation log's epoch, a conv_seq) that is stored with the source's entries and
// listed in every SyncStart. Each source gets the checks, storing, acknowledgement, gap
// handling and heartbeat checks of the user log on its own; the user log still says where the
// user's following of the group starts and ends (its membership entries), and carries the user's
// own receipts there. A source's entries reach the app as EntryEvents naming it (Source), its end
// as SourceEndEvent; a source too far behind is rebased alone (RebaseEvent with Source).
//
// # Checking what it stored
//
// The checks above prove that each batch continued the cursor, not that the store still holds
// what the server sent: a storage bug, a database restored from a backup or edited by hand may
// change it later. So the client compares them (PROTOCOL §8.7): once a sync stream has caught up
// (its first heartbeat at the head, so after every resume) it asks the server for the digest of
// the newest entries it stored of each sub-log, and with every head check for the digest of the
// next window of a walk through all it stored, and compares each with its own digest of the
// same entries — one query each, paced with the other queries. A range that differs is reported
// to the server, its entries are dropped from the store in one transaction with the cursor moved
// back before them, and the sync stream replays them (with no ceiling, so that a rebase cannot
// jump over them); the messages they carry replace the stored copies (MismatchEvent). A range
// that still differs after that is left as the server sent it, not refetched or reported again,
// and logged as the bug it is. Entries a rebase jumped over are not stored, so they are not
// checked; nor are the sources' (check.go says why).
//
// # Delivery states and read counts
//
// A message goes sending → sent → delivered → read (PROTOCOL "Delivery states and read counts"),
// never back. Delivered means a device of another member has stored it: the server can prove
// only what a device acknowledged, and waiting for every device would never finish for a dormant
// one. The server tells the sender's devices with entries of their own log: kind 8
// (KindDelivered, "this member's devices stored the conversation up to UpTo") and the receipts
// (kind 2), which imply delivery up to the same conv_seq. The SDK keeps each other member's
// marks per conversation and the highest of them (the peer marks) in the local store, written in
// the same transaction as the entries that carry them, so a restart keeps the statuses and a
// step reported before it is not reported again. It reports a member's mark that moves with
// DeliveryEvent and each step of this user's messages — sent from this device or another — with
// StatusEvent (delivered before read, once each; ClientMsgID set when this device queued it);
// StatusOf, Lookup, Outbox and Messages answer the current status. A rebase loads the peer
// marks of direct conversations without reporting steps (RebaseEvent: refresh).
//
// In a group a message counts as delivered (read) as soon as one other member's marks cover it,
// as the messengers that show one tick do. The server sends delivered entries only to the
// senders of the messages they cover, and none at all in a group larger than its
// status_fanout_limit (100): there the exact numbers come from the server on demand — Receipts
// counts the members at each message and those who have it delivered and read (the sender is
// not left out of the counts), and Readers pages through who they are.
//
// # Local store
//
// One Pebble database per device holds the outbox, the cursor, the received entries and a
// per-conversation view for the app: messages in conv_seq order (recalls marked), read and
// delivered marks per member and member lists, and the user's id, so that a Client opened offline knows it. Entries
// are deduplicated by msg_id, so an entry that arrives twice (through the sync stream and an ack,
// replayed after an epoch change, or loaded by a rebase and then synced) appears once; only the
// replay of a range found damaged replaces the stored copies.
//
// # Limits and reconnecting
//
// The client keeps to the limits the server's Welcome announced: it reads frames up to
// max_frame, refuses a body above max_body when it is queued, fails a request whose frame would
// exceed max_frame without sending it (the server would have to reset the stream), and takes a
// sync stream without any frame for three heartbeat_ms intervals for dead (it then reconnects).
// It paces its outbox with a token bucket of send_burst mutations refilled at send_rate_per_s,
// the server's own, so that rate_limited answers do not eat into a message's bounded retries (a
// rebase's and the digest checks' queries likewise, with query_rate_per_s and query_burst), and
// sends its head check at
// least twice per request_idle_ms, so the server never closes its request stream as idle. It
// uses three streams (control, request, sync), within any max_streams.
//
// It reconnects on its own with a jittered backoff (500 ms doubling to 30 s, never less than a
// server's retry-after), trying the next node of Config.Addrs after a failed dial, and also when
// the node it is on cannot serve it: its sync stream has said Stale for Config.StaleFailover (the
// node is cut off from the log's shard leader), or it answered two sends in a row with
// unavailable. The backoff starts over only once a connection has stayed up for 10 s: a
// connection that fails sooner — its sync stream refused, a frame it cannot read — counts as a
// failed attempt, so a persistent failure is retried every 30 s, not in a loop. Each Client keeps
// a TLS session cache, so a reconnect to a node it has been connected to resumes the TLS session
// (ConnectedEvent.Resumed).
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
// The client reports what happens — new entries, outbox status changes, delivery steps and
// other members' marks (DeliveryEvent), gaps, rebases, epoch
// changes, stored ranges found damaged (MismatchEvent), the connection coming and going
// (ConnectedEvent, OfflineEvent) — on an event
// channel, so an app can update its UI without polling. It also says whether syncing works:
// SyncedEvent when the device has caught up with the server's head (as a Heartbeat proves it),
// StaleEvent when the node it is on cannot prove the head (show "connecting…"), SyncFailedEvent
// when SyncFailureThreshold attempts in a row made no progress (with the last error; repeated at
// each further failure until syncing works again).
package client
