package proto

// Fixtures: one frame of every type with every field set to a non-zero, recognisable value, so
// a round trip or a golden file covers every key.

import "crypto/sha256"

var fixtureEntry = Entry{
	Seq: 41, Kind: KindMessage, MsgID: "3.99.1", Conv: "g1", ConvSeq: 12, Sender: "bob",
	Time: 1_700_000_000_000_000_000, Body: []byte{0, 1, 0xff}, UpTo: 11, Target: "3.98.0",
	Members: []string{"x", "y"},
}

var fixtureConv = ConvInfo{
	Conv: "g1", Kind: ConvGroup, Epoch: 1_700_000_000_000_000_001, First: 4, Head: 1000,
	Members: []string{"alice", "bob"}, ReadMark: 999, MemberCount: 2, Role: RoleAdmin,
	DeliveredMark: 1000, PeerDelivered: 998, PeerRead: 997,
}

// fixtureRoleChange is an entry of the kind that sets Role, in a user log where its member list
// was left out (MemberCount).
var fixtureRoleChange = Entry{
	Seq: 43, Kind: KindRoleChange, MsgID: "3.121.0", Conv: "g1", ConvSeq: 14, Sender: "alice",
	Time: 2, Role: RoleAdmin, MemberCount: 40,
}

// fixtureDelivered is an entry of the kind the server writes when a member's devices have stored
// a conversation (revision 5), as it follows fixtureEntry in a conversation's history.
var fixtureDelivered = Entry{
	Seq: 42, Kind: KindDelivered, MsgID: "3.100.0", Conv: "g1", ConvSeq: 42, Sender: "carol",
	Time: 1_700_000_000_000_000_001, UpTo: 41,
}

func fixtures() []Frame {
	return []Frame{
		&Hello{Token: "tok.en", Device: "phone", ClientVersion: "syncd-go/0.1.0", ProtoVersion: 1},
		&Welcome{User: "alice", Device: "phone", ServerTime: 1_700_000_000_123_456_789, Session: "s-1",
			ProtoVersion: 1, Limits: Limits{MaxFrame: DefaultMaxFrame, MaxBody: MaxBody, MaxBatch: 256, SendRatePerS: 50, HeartbeatMs: 15000,
				MaxStreams: 16, SendBurst: 100, QueryRatePerS: 50, QueryBurst: 200, RequestIdleMs: 300_000},
			TokenExpires: 1_700_086_400_000_000_000},
		&Error{ID: 7, Code: CodeRateLimited, Message: "slow down", RetryAfterMs: 1500},
		&Refresh{Token: "v1.new.token"},
		&Refreshed{TokenExpires: 1_700_172_800_000_000_000},
		&Report{Kind: ReportMismatch, Conv: "g1", Epoch: 9, From: 40, To: 59},
		&Send{ID: 1, Conv: "d:alice:bob", ClientMsgID: "cm-1", Body: []byte("hello"), Peer: "bob"},
		&Ack{ID: 1, MsgID: "3.99.0", Conv: "d:alice:bob", ConvSeq: 12, Time: 1_700_000_000_000_000_000, Epoch: 5, Duplicate: true, NoOp: true},
		&MarkRead{ID: 2, Conv: "g1", ClientMsgID: "cm-2", UpTo: 12},
		&Recall{ID: 3, Conv: "g1", ClientMsgID: "cm-3", Target: "3.99.0"},
		&CreateGroup{ID: 4, Conv: "g1", ClientMsgID: "cm-4", Members: []string{"bob", "carol"}},
		&AddMembers{ID: 5, Conv: "g1", ClientMsgID: "cm-5", Members: []string{"dave"}},
		&RemoveMembers{ID: 6, Conv: "g1", ClientMsgID: "cm-6", Members: []string{"carol", "dave"}},
		&SetRole{ID: 12, Conv: "g1", ClientMsgID: "cm-12", Members: []string{"bob"}, Role: RoleOwner},
		&Edit{ID: 13, Conv: "g1", ClientMsgID: "cm-13", Target: "3.99.0", Body: []byte("hello, edited")},
		&React{ID: 14, Conv: "g1", ClientMsgID: "cm-14", Target: "3.99.0", Reaction: "👍", Remove: true},
		&SyncStart{Epoch: 9, Pos: 40, Ceiling: 100_000, MaxBatch: 500, Subs: []SubCursor{{Epoch: 9, Pos: 40}, {}, {Epoch: 11, Pos: 3}}},
		&Batch{Epoch: 9, Entries: []Entry{fixtureEntry, {Seq: 42, Kind: KindReceipt, MsgID: "3.120.0", Conv: "g1", ConvSeq: 13, Sender: "carol", Time: 1, UpTo: 12}, fixtureRoleChange}, Head: 1 << 40, Sub: 2},
		&Heartbeat{Epoch: 9, Head: 42, ServerTime: 1_700_000_000_000_000_000, Sub: 1},
		&TooOld{Epoch: 9, First: 100, Head: 200, Sub: 3},
		&EpochChanged{Epoch: 10, First: 1, Head: 3, Sub: 4},
		&Rebase{Epoch: 9, Head: 1 << 33, Sub: 5},
		&CursorAck{Epoch: 9, Pos: 42, Sub: 2},
		&Stale{Epoch: 9, Head: 42, UnheardMs: 2500, Sub: 15},
		&SourceEnd{Source: "big", Last: 1 << 33},
		&ConvList{ID: 8, After: "d:alice:bob", Limit: 100},
		&ConvListResult{ID: 8, Convs: []ConvInfo{fixtureConv, {Conv: "g2", Kind: ConvDirect, Epoch: 1, First: 1}}, More: true},
		&ConvState{ID: 9, Conv: "g1"},
		&ConvStateResult{ID: 9, Conv: fixtureConv},
		&History{ID: 10, Conv: "g1", Before: 500, Limit: 50},
		&HistoryResult{ID: 10, Entries: []Entry{fixtureEntry, fixtureDelivered}, Epoch: 5, First: 4, Head: 1000},
		&HeadCheck{ID: 11},
		&Head{ID: 11, Epoch: 9, Head: 42, First: 7, Subs: []SubHead{{Epoch: 9, Head: 42, First: 7}, {Epoch: 11, Head: 5, First: 1}}},
		&Members{ID: 13, Conv: "g1", After: "alice", Limit: 100},
		&MembersResult{ID: 13, Members: []Member{{User: "bob", Role: RoleOwner}, {User: "carol", Role: RoleMember}}, More: true},
		&Digest{ID: 14, Sub: 2, Epoch: 9, From: 41, To: 1 << 40},
		&DigestResult{ID: 14, Epoch: 9, From: 41, To: 41, Count: 1, Digest: DigestOf([]Entry{fixtureEntry}), First: 7, Head: 42},
		&Receipts{ID: 15, Conv: "g1", Seqs: []Position{12, 1 << 40, 3}},
		&ReceiptsResult{ID: 15, Counts: []ReceiptCount{{ConvSeq: 12, Members: 300, Delivered: 120, Read: 7}, {ConvSeq: 1 << 40}, {ConvSeq: 3, Members: 1 << 20, Delivered: 1 << 20, Read: 1}}},
		&Readers{ID: 16, Conv: "g1", ConvSeq: 12, State: KindDelivered, After: "alice", Limit: 50},
		&ReadersResult{ID: 16, Users: []string{"bob", "carol"}, Next: "dave", More: true},
	}
}

// Revision 6 (sources): a large group "big" whose conversation log has the epoch fixtureBigEpoch,
// followed by the user from the member_add at conv_seq 7000 (fixtureFollow) until it is removed at
// 7003 (fixtureUnfollow); the user's own receipt there has no conv_seq (fixtureBigReceipt).
const fixtureBigEpoch Epoch = 1_700_000_000_000_000_002

var (
	fixtureFollow = Entry{
		Seq: 44, Kind: KindMemberAdd, MsgID: "5.7000.0", Conv: "big", ConvSeq: 7000, Sender: "alice",
		Time: 3, MemberCount: 1200, Source: true,
	}
	fixtureBigReceipt = Entry{
		Seq: 45, Kind: KindReceipt, MsgID: "1.45.0", Conv: "big", Sender: "alice", Time: 4, UpTo: 7002,
	}
	fixtureUnfollow = Entry{
		Seq: 46, Kind: KindMemberRemove, MsgID: "5.7003.0", Conv: "big", ConvSeq: 7003, Sender: "alice",
		Time: 5, Members: []string{"alice"}, Source: true,
	}
	// fixtureBigMessage is the source's entry at conv_seq 7001, as a source's Batch carries it
	// (Seq = ConvSeq).
	fixtureBigMessage = Entry{
		Seq: 7001, Kind: KindMessage, MsgID: "5.7001.0", Conv: "big", ConvSeq: 7001, Sender: "bob",
		Time: 6, Body: []byte("hi all"),
	}
)

// fixtureHash is SHA-256(s), a folded entry's body_hash.
func fixtureHash(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

// namedFrame is a fixture variant: a frame of a type fixtures() already covers, with keys its
// fixture leaves out. Its golden file is testdata/golden/variants/<name>.v1.hex, where name is
// "<type>.<variant>".
type namedFrame struct {
	name string
	f    Frame
}

// fixtureVariants covers the keys revisions 6 and 7 added to frames whose golden files predate it: the
// fixtures of those frames keep their bytes (new keys are omitted when zero), and these carry
// the new keys, each non-zero.
func fixtureVariants() []namedFrame {
	bigConv := ConvInfo{
		Conv: "big", Kind: ConvGroup, Epoch: fixtureBigEpoch, First: 1, Head: 7002, ReadMark: 7002,
		MemberCount: 1200, Role: RoleMember, DeliveredMark: 7002, Source: true,
	}
	return []namedFrame{
		{"sync_start.sources", &SyncStart{Epoch: 9, Pos: 40, Ceiling: 100_000, Subs: []SubCursor{{Epoch: 9, Pos: 40}},
			Sources: []SourceCursor{{Conv: "big", Epoch: fixtureBigEpoch, Pos: 7001}, {Conv: "g:new"}}}},
		{"batch.following", &Batch{Epoch: 9, Entries: []Entry{fixtureFollow, fixtureBigReceipt, fixtureUnfollow}, Head: 46}},
		{"batch.source", &Batch{Epoch: fixtureBigEpoch, Entries: []Entry{fixtureBigMessage}, Head: 7002, Source: "big", After: 7000}},
		{"heartbeat.source", &Heartbeat{Epoch: fixtureBigEpoch, Head: 7002, ServerTime: 1_700_000_000_000_000_000, Source: "big"}},
		{"too_old.source", &TooOld{Epoch: fixtureBigEpoch, First: 5000, Head: 7002, Source: "big"}},
		{"epoch_changed.source", &EpochChanged{Epoch: fixtureBigEpoch + 1, First: 1, Head: 2, Source: "big"}},
		{"rebase.source", &Rebase{Epoch: fixtureBigEpoch, Head: 90_000, Source: "big"}},
		{"cursor_ack.source", &CursorAck{Epoch: fixtureBigEpoch, Pos: 7001, Source: "big"}},
		{"stale.source", &Stale{Epoch: fixtureBigEpoch, Head: 7002, UnheardMs: 2500, Source: "big"}},
		{"conv_state_result.source", &ConvStateResult{ID: 9, Conv: bigConv}},
		// Revision 7: an edit, a reaction, and the folded stubs of an edit and a receipt.
		{"batch.edits", &Batch{Epoch: 9, Entries: []Entry{
			{Seq: 50, Kind: KindEdit, MsgID: "3.130.0", Conv: "g1", ConvSeq: 20, Sender: "alice", Time: 7, Target: "3.99.0", Body: []byte("hello, edited")},
			{Seq: 51, Kind: KindReaction, MsgID: "3.131.0", Conv: "g1", ConvSeq: 21, Sender: "bob", Time: 8, Target: "3.99.0", Reaction: "👍"},
			{Seq: 52, Kind: KindReaction, MsgID: "3.132.0", Conv: "g1", ConvSeq: 22, Sender: "bob", Time: 9, Target: "3.99.0", Reaction: "👍", Remove: true},
		}, Head: 52}},
		{"batch.folded", &Batch{Epoch: 9, Entries: []Entry{
			{Seq: 50, Kind: KindEdit, MsgID: "3.130.0", Conv: "g1", ConvSeq: 20, Sender: "alice", Time: 7, Target: "3.99.0", Folded: 53,
				BodyHash: fixtureHash("hello, edited")},
			{Seq: 51, Kind: KindReceipt, MsgID: "3.120.0", Conv: "g1", ConvSeq: 13, Sender: "carol", Time: 1, Folded: 54},
		}, Head: 54}},
		// Revision 8: a cursor that holds across a restore.
		{"epoch_changed.continues", &EpochChanged{Epoch: fixtureBigEpoch + 1, First: 1, Head: 70, Sub: 1, Continues: true}},
	}
}

// allFixtures returns fixtures() and the frames of fixtureVariants(): every frame type and
// every key, for round trips and fuzz seeds.
func allFixtures() []Frame {
	all := fixtures()
	for _, v := range fixtureVariants() {
		all = append(all, v.f)
	}
	return all
}
