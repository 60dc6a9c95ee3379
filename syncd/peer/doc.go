// Package peer is syncd's node-to-node call plane: what one node asks another about a shard the
// asking node does not host. A device may connect to any node, and an operator may ask any node,
// but in a managed cluster a node holds replicas of only some shards; so its sync streams and
// queries read a replica elsewhere (reads), and its operator views run their per-shard parts on
// a replica elsewhere (inspections). Both travel as calls over raftstore's node-to-node
// connection (raftstore.Node.Call, answered by raftstore.App.Serve).
//
// The package owns the versioned format of those calls (codec.go, messages.go), the caller side
// that tries each replica in turn (Peer.Remote, Peer.Run), and the answering side that dispatches
// by operation code to the handlers other packages register (Peer.Handle, Peer.Serve).
//
// # Format, version 1
//
// A request and an answer are each one call payload:
//
//	request: version u8 (1) | op u8 | flags u8 (bit 0: leader only) | shard uvarint | args
//	answer:  version u8 (1) | result
//
// args and result are msgpack maps whose keys are the explicit field tags of the message types
// in messages.go (a "msgpack" tag, else the "json" tag of the admin API types the inspections
// answer with). Operations are named by the stable codes of [Op]: add codes and fields, never
// renumber, rename or reuse one, so nodes of adjacent versions keep talking during a rolling
// upgrade (unknown fields are ignored; absent fields decode as zero). A payload of another
// version is refused with an error naming both versions. Golden bytes of every message sit in
// testdata/ and a fuzz target decodes arbitrary payloads.
package peer
