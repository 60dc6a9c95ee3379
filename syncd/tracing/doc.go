// Package tracing records a message's path through a node as OpenTelemetry spans exported over
// OTLP/HTTP (issue #26): the send (a mutation received, up to its ack), the Raft commit of its
// append (propose → applied), the fan-out of its outbox record to each destination shard and
// the delivery there into the recipients' logs (that shard's commit), the push of a frame
// carrying it to a live device, and the device's ack of a cursor past it. It is off unless an
// endpoint is configured; then New returns nil, and every method of a nil *Tracer returns at
// once without allocating, so the send path pays a nil check.
//
// One trace per message. The send span is the root (sampled at Config.SampleRatio; every later
// step follows the send's decision, ParentBased), the commit a child of it; the fan-out is a
// child of the send span of the first message in its batch and links the others (at most
// maxLinks), the delivery a child of the fan-out; the push is a child of the first message's
// send span in its frame and links the others; the device ack a child of the push.
//
// How the context travels. The later steps are asynchronous: the fan-out reads the outbox back
// and a push reads the user's log back, so nothing of the send's context comes with them, and
// stored formats (the outbox, the logs, the Raft commands) are not changed to carry one. Each
// node keeps a bounded registry instead: message id → the send span's context, filled when a
// send's commit returns (its msg_id is known only then), the oldest of registrySize forgotten
// first. The fan-out and the push look their entries' msg ids up there when they end, and so
// find the send of any message sent through this node lately, sampled or not (an unsampled
// send is remembered too, so that its fan-out and push stay unsampled rather than starting
// traces of their own). Their spans are created when the step ends, with the times measured
// when it began (trace.WithTimestamp): the fan-out of a message can begin before its send's
// Propose has returned (the apply wakes the fan-out), but ends only after a further commit on
// the destination, by which time the send has registered.
//
// Steps on another node than the send's — a send forwarded to the home shard's leader on
// another node, whose fan-out runs there; a sync stream served by another node — find nothing
// in their registry and start a trace of their own (a root, sampled at the same ratio) carrying
// the msg ids as an attribute (syncd.msg_ids), by which a tracing backend joins the pieces. The
// alternative, a W3C traceparent in the forwarded proposal, would change raftstore's node-plane
// format, and would still not reach the fan-out, which reads the outbox and not the proposal
// (docs/DECISIONS.md D65).
//
// Attributes carry ids, never payloads or credentials: message ids (shard.index.sub), shards,
// positions, sizes and counts, the entry kind, and a conversation reference: a keyed hash of the
// conversation id (syncd.conv_ref), because a direct conversation's id names its two users,
// who should not leave the box in plain text. No user or device id is exported.
//
// A Tracer is safe for concurrent use.
package tracing
