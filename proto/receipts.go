package proto

// Delivery and read counts (revision 5; docs/PROTOCOL.md §8.8, "Delivery states and read counts").
// A direct conversation's sender learns the other member's marks from its own log (kind 8 and
// kind 2 entries) and from ConvInfo.PeerDelivered and PeerRead; a group's sender asks how many
// members have a message delivered or read with Receipts, and who with Readers. Both are queries:
// they read the conversation's member state without changing anything.

// MaxReceiptSeqs is the most conv_seqs one [Receipts] names: enough for a screenful of one's own
// messages, and small enough that the answer (a few KB) and the work behind it (a bounded read
// of the conversation's counts per seq) stay small.
const MaxReceiptSeqs = 100

// Receipts asks, for some of a conversation's conv_seqs (typically the requesting user's own
// messages on screen), how many members the conversation had at each one and how many of them
// have it delivered and read. The user must be a member (CodeNotMember); an unknown
// conversation gets CodeNoConversation.
type Receipts struct {
	ID   uint64     `msgpack:"id"`   // request id
	Conv string     `msgpack:"conv"` // conversation id
	Seqs []Position `msgpack:"seqs"` // 1 to MaxReceiptSeqs conv_seqs, each at least 1, in any order
}

// FrameType implements Frame.
func (*Receipts) FrameType() Type { return TypeReceipts }

// RequestID implements Request.
func (r *Receipts) RequestID() uint64 { return r.ID }

// Validate checks the request id, the conversation id and Seqs: 1 to MaxReceiptSeqs conv_seqs,
// none of them 0 (all CodeInvalidArgument).
func (r *Receipts) Validate() error {
	if err := checkRequestID(r.ID); err != nil {
		return err
	}
	if err := checkID("conversation id", r.Conv); err != nil {
		return err
	}
	switch {
	case len(r.Seqs) == 0:
		return invalid("receipts of no conv_seq: name 1 to %d", MaxReceiptSeqs)
	case len(r.Seqs) > MaxReceiptSeqs:
		// invalid_argument, not too_large: the storage core refuses the same request as
		// invalid, and a client gets one answer whichever layer checks it.
		return invalid("receipts of %d conv_seqs, at most %d", len(r.Seqs), MaxReceiptSeqs)
	}
	for _, s := range r.Seqs {
		if s == 0 {
			return invalid("receipts of conv_seq 0: positions start at 1")
		}
	}
	return nil
}

// ReceiptsResult answers Receipts: one count per requested conv_seq, in the request's order.
type ReceiptsResult struct {
	ID     uint64         `msgpack:"id"`     // request id
	Counts []ReceiptCount `msgpack:"counts"` // one per Receipts.Seqs, in that order
}

// FrameType implements Frame.
func (*ReceiptsResult) FrameType() Type { return TypeReceiptsResult }

// RequestID implements Response.
func (r *ReceiptsResult) RequestID() uint64 { return r.ID }

// ReceiptCount is the state of one conv_seq in a [ReceiptsResult]. Members counts the current
// members who had joined before the entry (those who joined later never had it to receive);
// Delivered and Read count those of them whose delivered and read marks cover it (Read ≤
// Delivered ≤ Members). The counts are not adjusted for the entry's sender: it is one of
// Members, and is counted in Delivered and Read as soon as its own marks pass the entry (when it
// reads, or its devices store, later entries). A client showing "read by n of m" to the sender
// leaves the sender out itself when it wants others only. A conv_seq outside the retained range
// [First, Head] of the conversation answers all zeros.
type ReceiptCount struct {
	ConvSeq   Position `msgpack:"conv_seq"`  // the conv_seq asked about
	Members   uint32   `msgpack:"members"`   // members who had joined before ConvSeq
	Delivered uint32   `msgpack:"delivered"` // of Members, those with ConvSeq delivered (one device stored it)
	Read      uint32   `msgpack:"read"`      // of Members, those who have read ConvSeq
}

// Readers pages through the members of a conversation who have one entry delivered (State
// KindDelivered) or read (State KindReceipt), in ascending order of user id. The user must be a
// member (CodeNotMember); an unknown conversation gets CodeNoConversation.
type Readers struct {
	ID      uint64   `msgpack:"id"`       // request id
	Conv    string   `msgpack:"conv"`     // conversation id
	ConvSeq Position `msgpack:"conv_seq"` // the entry, at least 1
	// State is KindDelivered (members with ConvSeq delivered, read ones included) or
	// KindReceipt (members who have read it).
	State Kind   `msgpack:"state"`
	After string `msgpack:"after"` // members with ids above this one; "" = from the start
	Limit uint32 `msgpack:"limit"` // most users: 0 = MaxPage; larger values are lowered to it
}

// FrameType implements Frame.
func (*Readers) FrameType() Type { return TypeReaders }

// RequestID implements Request.
func (r *Readers) RequestID() uint64 { return r.ID }

// Validate checks the request id, the conversation id, ConvSeq (at least 1), State
// (KindDelivered or KindReceipt) and After, when set (all CodeInvalidArgument).
func (r *Readers) Validate() error {
	if err := checkRequestID(r.ID); err != nil {
		return err
	}
	if err := checkID("conversation id", r.Conv); err != nil {
		return err
	}
	switch {
	case r.ConvSeq == 0:
		return invalid("readers of conv_seq 0: positions start at 1")
	case r.State != KindDelivered && r.State != KindReceipt:
		return invalid("readers in state %s: want %s (%d) or %s (%d)", r.State, KindDelivered, KindDelivered, KindReceipt, KindReceipt)
	}
	if r.After != "" {
		return checkID("after", r.After)
	}
	return nil
}

// ReadersResult answers Readers. The server looks at a bounded number of member records per
// request (10,000), so a page may hold fewer users than Limit — none at all in a large group
// where few have read — while More is set: ask again with After = Next until More is false.
type ReadersResult struct {
	ID    uint64   `msgpack:"id"`    // request id
	Users []string `msgpack:"users"` // ascending, all above the request's After
	// Next is the last member id the server looked at (at or above the last of Users): the
	// After of the next page. "" when no member was looked at.
	Next string `msgpack:"next"`
	More bool   `msgpack:"more"` // members after Next remain to be looked at
}

// FrameType implements Frame.
func (*ReadersResult) FrameType() Type { return TypeReadersResult }

// RequestID implements Response.
func (r *ReadersResult) RequestID() uint64 { return r.ID }
