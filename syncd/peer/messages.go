package peer

import (
	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// The messages of the format. log's types are its on-disk model and carry no tags, so reads
// travel as the tagged copies below, converted at both ends; the inspections answer with the
// admin API's report types, whose JSON tags name their fields here too.

// ReadArgs are the arguments of the read operations; each sets the fields its Op lists.
type ReadArgs struct {
	UID        string `msgpack:"uid"`
	Conv       string `msgpack:"conv"`
	After      string `msgpack:"after"`
	Epoch      uint64 `msgpack:"epoch"`
	Pos        uint64 `msgpack:"pos"` // from (reads forward) or before (ReadConvBefore)
	LimitCount int    `msgpack:"limit_count"`
	LimitBytes int    `msgpack:"limit_bytes"`
	Count      int    `msgpack:"count"` // UserConvs' limit
	WaitMS     int64  `msgpack:"wait_ms"`
	// UIDs are OpUserGroups' users, at most MaxReadCount. Omitted when empty (see ReadAnswer).
	UIDs []string `msgpack:"uids,omitempty"`
	// Seqs are OpReceipts' positions, at most log.MaxReceiptSeqs; State is OpReaders' mark
	// (log.KindDelivered or log.KindReceipt) and Pos its position.
	Seqs  []uint64 `msgpack:"seqs,omitempty"`
	State uint8    `msgpack:"state,omitempty"`
}

// Bounds of one answer, whatever the asking node sends: a read returns at most MaxReadCount
// entries or ids and stops adding entries past MaxReadBytes (the largest frame a client may be
// sent), so no call can make a node read or hold an unbounded part of a log.
const (
	MaxReadCount = proto.MaxPage
	MaxReadBytes = 16 << 20
)

// Limit returns the read limit the arguments carry, capped at MaxReadCount and MaxReadBytes
// (zero or negative fields mean log's defaults).
func (a ReadArgs) Limit() log.Limit {
	return log.Limit{Count: min(a.LimitCount, MaxReadCount), Bytes: min(a.LimitBytes, MaxReadBytes)}
}

// ConvCount returns UserConvs' limit, capped at MaxReadCount.
func (a ReadArgs) ConvCount() int { return min(a.Count, MaxReadCount) }

// WithLimit returns a with lim set.
func (a ReadArgs) WithLimit(lim log.Limit) ReadArgs {
	a.LimitCount, a.LimitBytes = lim.Count, lim.Bytes
	return a
}

// ReadAnswer is the result of a read operation; the field of the request's Op is set.
type ReadAnswer struct {
	Info LogInfo   `msgpack:"info"`
	Conv ConvState `msgpack:"conv"`
	IDs  []string  `msgpack:"ids"`
	Read Read      `msgpack:"read"`
	// Members and More answer OpMembers. Fields added after version 1 of the codec are
	// omitted when zero, so the answers of older operations keep their bytes.
	Members []Member `msgpack:"members,omitempty"`
	More    bool     `msgpack:"more,omitempty"`
	// Counts answers OpUserGroups.
	Counts []int `msgpack:"counts,omitempty"`
	// Receipts answers OpReceipts; Next (with IDs and More) OpReaders.
	Receipts []ReceiptCount `msgpack:"receipts,omitempty"`
	Next     string         `msgpack:"next,omitempty"`
	// Follows answers OpFollows.
	Follows []Follow `msgpack:"follows,omitempty"`
	// Stale and UnheardMS carry the lease of the answering replica (raftstore.Lease) with the
	// reads of a user log (OpUserInfo, OpReadUser, OpReadUserWait) and of a source (OpReadConvWait), taken before the read: Stale when it does
	// not hold it, UnheardMS how long it has not heard from its shard's leader. Omitted while it
	// holds it, so an answer from a node of before them reads as current, as it was taken then.
	Stale     bool  `msgpack:"stale,omitempty"`
	UnheardMS int64 `msgpack:"unheard_ms,omitempty"`
}

// Member is log.Member on the wire.
type Member struct {
	User string `msgpack:"user"`
	Role uint8  `msgpack:"role"`
}

// Follow is log.Follow on the wire.
type Follow struct {
	Conv    string   `msgpack:"conv"`
	Periods []Period `msgpack:"periods"`
}

// Period is log.Period on the wire.
type Period struct {
	From uint64 `msgpack:"from"`
	To   uint64 `msgpack:"to"`
	Gate uint64 `msgpack:"gate"`
}

// FromFollows converts log.Follows.
func FromFollows(fs []log.Follow) []Follow {
	out := make([]Follow, len(fs))
	for i, f := range fs {
		out[i].Conv = f.Conv
		for _, p := range f.Periods {
			out[i].Periods = append(out[i].Periods, Period{From: uint64(p.From), To: uint64(p.To), Gate: uint64(p.Gate)})
		}
	}
	return out
}

// LogFollows converts back to log.Follows.
func LogFollows(fs []Follow) []log.Follow {
	out := make([]log.Follow, len(fs))
	for i, f := range fs {
		out[i].Conv = f.Conv
		for _, p := range f.Periods {
			out[i].Periods = append(out[i].Periods, log.Period{From: log.Position(p.From), To: log.Position(p.To), Gate: log.Position(p.Gate)})
		}
	}
	return out
}

// ReceiptCount is log.ReceiptCount on the wire.
type ReceiptCount struct {
	ConvSeq   uint64 `msgpack:"conv_seq"`
	Members   int    `msgpack:"members"`
	Delivered int    `msgpack:"delivered"`
	Read      int    `msgpack:"read"`
}

// LogInfo is log.LogInfo on the wire.
type LogInfo struct {
	Epoch     uint64 `msgpack:"epoch"`
	First     uint64 `msgpack:"first"`
	Head      uint64 `msgpack:"head"`
	Continues bool   `msgpack:"continues,omitempty"`
}

// ConvState is log.ConvState on the wire.
type ConvState struct {
	Conv     string   `msgpack:"conv"`
	Kind     uint8    `msgpack:"kind"`
	Info     LogInfo  `msgpack:"info"`
	Members  []string `msgpack:"members"`
	ReadMark uint64   `msgpack:"read_mark"`
	Count    int      `msgpack:"member_count,omitempty"` // omitted when zero, like every later field
	Role     uint8    `msgpack:"role,omitempty"`
	// The asking member's delivered mark, and in a direct conversation the other member's marks.
	DeliveredMark uint64 `msgpack:"delivered_mark,omitempty"`
	PeerDelivered uint64 `msgpack:"peer_delivered,omitempty"`
	PeerRead      uint64 `msgpack:"peer_read,omitempty"`
	Large         bool   `msgpack:"large,omitempty"`
}

// Read is log.Read on the wire.
type Read struct {
	Status  uint8   `msgpack:"status"`
	Info    LogInfo `msgpack:"info"`
	Entries []Entry `msgpack:"entries"`
}

// MsgID is log.MsgID on the wire.
type MsgID struct {
	Shard uint32 `msgpack:"shard"`
	Index uint64 `msgpack:"index"`
	Sub   uint32 `msgpack:"sub"`
}

// Entry is log.Entry on the wire.
type Entry struct {
	Seq      uint64   `msgpack:"seq"`
	Kind     uint8    `msgpack:"kind"`
	MsgID    MsgID    `msgpack:"msg_id"`
	Conv     string   `msgpack:"conv"`
	ConvSeq  uint64   `msgpack:"conv_seq"`
	Sender   string   `msgpack:"sender"`
	Time     int64    `msgpack:"time"`
	Body     []byte   `msgpack:"body"`
	ReadUpTo uint64   `msgpack:"read_up_to"`
	Target   MsgID    `msgpack:"target"`
	Members  []string `msgpack:"members"`
	Role     uint8    `msgpack:"role,omitempty"`
	Count    int      `msgpack:"member_count,omitempty"`
	Source   bool     `msgpack:"source,omitempty"`
}

// CursorsArgs are the arguments of OpCursors.
type CursorsArgs struct {
	User string `msgpack:"user"`
}

// TraceHomeArgs are the arguments of OpTraceHome.
type TraceHomeArgs struct {
	MsgID MsgID `msgpack:"msg_id"`
}

// TraceHome is the result of OpTraceHome. Found is false when the home shard's replica does not
// know the message; Report is then empty. Otherwise Report has everything but Scan and Users, and
// Members lists the conversation's current members — unless ConvMoved: the conversation moved to
// another shard since the message was sent, which holds its members and history (and the
// message's index entry, so the same inspection there finds them); the outbox part is this
// shard's, which stays the message's source.
type TraceHome struct {
	Found     bool                 `msgpack:"found"`
	Report    adminapi.TraceReport `msgpack:"report"`
	Members   []string             `msgpack:"members"`
	ConvMoved bool                 `msgpack:"conv_moved,omitempty"` // omitted when false: older nodes read the same bytes
}

// TraceUsersArgs are the arguments of OpTraceUsers: the users of one shard to trace message
// MsgID for, and the home shard's outbox as the trace found it.
type TraceUsersArgs struct {
	MsgID  MsgID                `msgpack:"msg_id"`
	Scan   int                  `msgpack:"scan"`
	Outbox adminapi.TraceOutbox `msgpack:"outbox"`
	Users  []TraceUserArgs      `msgpack:"users"`
}

// TraceUserArgs is one user to trace, and whether the user is a current member.
type TraceUserArgs struct {
	User   string `msgpack:"user"`
	Member bool   `msgpack:"member"`
}

// DeadLettersArgs are the arguments of OpDeadLetters: list at most Limit (0: only count them).
type DeadLettersArgs struct {
	Limit    int  `msgpack:"limit"`
	Archived bool `msgpack:"archived,omitempty"` // list (and count) the archive instead of the held ones
}

// DeadLetters is the result of OpDeadLetters: how many dead letters the shard holds, and the
// first of them, without bodies (only their sizes), so that an answer stays small.
type DeadLetters struct {
	Count uint64       `msgpack:"count"`
	Items []DeadLetter `msgpack:"items"`
}

// DeadLetterArgs are the arguments of OpDeadLetter.
type DeadLetterArgs struct {
	Dest uint32 `msgpack:"dest"`
	Pos  uint64 `msgpack:"pos"`
}

// DeadLetterAnswer is the result of OpDeadLetter; Found is false when the source shard holds no
// such dead letter (never recorded, or dropped since), neither held nor archived.
type DeadLetterAnswer struct {
	Found  bool       `msgpack:"found"`
	Letter DeadLetter `msgpack:"letter"`
}

// DeadLetter is log.DeadLetter on the wire. In a DeadLetters list the entry's body is left out
// and BodyBytes gives its size.
type DeadLetter struct {
	Dest      uint32   `msgpack:"dest"`
	Pos       uint64   `msgpack:"pos"`
	Users     []string `msgpack:"users"`
	Reason    string   `msgpack:"reason"`
	FailedAt  int64    `msgpack:"failed_at"`
	Entry     Entry    `msgpack:"entry"`
	BodyBytes int      `msgpack:"body_bytes"`
	// The dead-letter process (log.DeadLetter's fields of the same names).
	Code       uint8  `msgpack:"code,omitempty"`
	Attempts   uint32 `msgpack:"attempts,omitempty"`
	LastTry    int64  `msgpack:"last_try,omitempty"`
	NextTry    int64  `msgpack:"next_try,omitempty"`
	ArchivedAt int64  `msgpack:"archived_at,omitempty"`
	Archived   bool   `msgpack:"archived,omitempty"`
}

// FromLogInfo converts a log.LogInfo.
func FromLogInfo(i log.LogInfo) LogInfo {
	return LogInfo{Epoch: uint64(i.Epoch), First: uint64(i.First), Head: uint64(i.Head), Continues: i.Continues}
}

// Log converts back to a log.LogInfo.
func (i LogInfo) Log() log.LogInfo {
	return log.LogInfo{Epoch: log.Epoch(i.Epoch), First: log.Position(i.First), Head: log.Position(i.Head), Continues: i.Continues}
}

// FromConvState converts a log.ConvState.
func FromConvState(c log.ConvState) ConvState {
	return ConvState{Conv: c.Conv, Kind: uint8(c.Kind), Info: FromLogInfo(c.Info), Members: c.Members, ReadMark: uint64(c.ReadMark),
		Count: c.MemberCount, Role: uint8(c.Role), DeliveredMark: uint64(c.DeliveredMark),
		PeerDelivered: uint64(c.PeerDelivered), PeerRead: uint64(c.PeerRead), Large: c.Large}
}

// Log converts back to a log.ConvState.
func (c ConvState) Log() log.ConvState {
	return log.ConvState{Conv: c.Conv, Kind: log.ConvKind(c.Kind), Info: c.Info.Log(), Members: c.Members, ReadMark: log.Position(c.ReadMark),
		MemberCount: c.Count, Role: log.Role(c.Role), DeliveredMark: log.Position(c.DeliveredMark),
		PeerDelivered: log.Position(c.PeerDelivered), PeerRead: log.Position(c.PeerRead), Large: c.Large}
}

// FromRead converts a log.Read; the entries' slices are shared, not copied.
func FromRead(r log.Read) Read {
	out := Read{Status: uint8(r.Status), Info: FromLogInfo(r.Info)}
	if len(r.Entries) > 0 {
		out.Entries = make([]Entry, len(r.Entries))
		for i := range r.Entries {
			out.Entries[i] = FromEntry(&r.Entries[i])
		}
	}
	return out
}

// Log converts back to a log.Read.
func (r Read) Log() log.Read {
	out := log.Read{Status: log.ReadStatus(r.Status), Info: r.Info.Log()}
	if len(r.Entries) > 0 {
		out.Entries = make([]log.Entry, len(r.Entries))
		for i, e := range r.Entries {
			out.Entries[i] = e.Log()
		}
	}
	return out
}

// FromMsgID converts a log.MsgID.
func FromMsgID(id log.MsgID) MsgID {
	return MsgID{Shard: uint32(id.Shard), Index: id.Index, Sub: id.Sub}
}

// Log converts back to a log.MsgID.
func (id MsgID) Log() log.MsgID {
	return log.MsgID{Shard: log.ShardID(id.Shard), Index: id.Index, Sub: id.Sub}
}

// FromEntry converts a log.Entry; its slices are shared, not copied.
func FromEntry(e *log.Entry) Entry {
	return Entry{Seq: uint64(e.Seq), Kind: uint8(e.Kind), MsgID: FromMsgID(e.MsgID), Conv: e.Conv,
		ConvSeq: uint64(e.ConvSeq), Sender: e.Sender, Time: e.Time, Body: e.Body,
		ReadUpTo: uint64(e.ReadUpTo), Target: FromMsgID(e.Target), Members: e.Members, Role: uint8(e.Role), Count: e.MemberCount,
		Source: e.Source}
}

// Log converts back to a log.Entry.
func (e Entry) Log() log.Entry {
	return log.Entry{Seq: log.Position(e.Seq), Kind: log.Kind(e.Kind), MsgID: e.MsgID.Log(), Conv: e.Conv,
		ConvSeq: log.Position(e.ConvSeq), Sender: e.Sender, Time: e.Time, Body: e.Body,
		ReadUpTo: log.Position(e.ReadUpTo), Target: e.Target.Log(), Members: e.Members, Role: log.Role(e.Role), MemberCount: e.Count,
		Source: e.Source}
}

// FromDeadLetter converts a log.DeadLetter; withBody false leaves the body out (BodyBytes still
// gives its size).
func FromDeadLetter(dl *log.DeadLetter, withBody bool) DeadLetter {
	out := DeadLetter{Dest: uint32(dl.Dest), Pos: dl.Pos, Users: dl.Users, Reason: dl.Reason,
		FailedAt: dl.FailedAt, Entry: FromEntry(&dl.Entry), BodyBytes: len(dl.Entry.Body),
		Code: dl.Code, Attempts: dl.Attempts, LastTry: dl.LastTry, NextTry: dl.NextTry, ArchivedAt: dl.ArchivedAt, Archived: dl.Archived}
	if !withBody {
		out.Entry.Body = nil
	}
	return out
}

// Log converts back to a log.DeadLetter.
func (dl DeadLetter) Log() log.DeadLetter {
	return log.DeadLetter{Dest: log.ShardID(dl.Dest), Pos: dl.Pos, Users: dl.Users, Reason: dl.Reason,
		FailedAt: dl.FailedAt, Entry: dl.Entry.Log(),
		Code: dl.Code, Attempts: dl.Attempts, LastTry: dl.LastTry, NextTry: dl.NextTry, ArchivedAt: dl.ArchivedAt, Archived: dl.Archived}
}
