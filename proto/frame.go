package proto

import (
	"strconv"

	"github.com/syncd-dev/syncd/proto/ident"
)

// ALPN is the TLS application protocol a client offers and the server requires. Its number is
// the protocol's major version: it changes only with an incompatible change, and a server may
// offer several majors side by side.
const ALPN = "syncd/1"

// Versions carried in frames.
const (
	// FrameVersion is the version byte in every frame header. It versions the framing and the
	// body encoding; a receiver rejects any other value with ErrBadVersion.
	FrameVersion = 1
	// ProtoVersion is the protocol revision within the ALPN major this package speaks, sent in
	// Hello.ProtoVersion and answered in Welcome.ProtoVersion. Revisions only add frame types,
	// fields and codes, which older peers ignore or treat as documented. Revision 2 adds [Stale]
	// on the sync stream, which a server sends only on connections of revision 2 or later, and
	// Refresh, SetRole, Members and the role_change kind. Revision 3 adds sub-logs: the vector
	// cursor (SyncStart.Subs), the sub of sync frames and cursor acks, Head.Subs and
	// CodeNeedsUpgrade. Revision 4 adds reconciliation: the Digest query, the Report control
	// frame and CodeTooOld, CodeEpochChanged (docs/PROTOCOL.md §9). Revision 5 adds delivery
	// states and read counts: the delivered kind (KindDelivered), ConvInfo's DeliveredMark,
	// PeerDelivered and PeerRead, and the Receipts and Readers queries. Revision 6 adds large
	// groups as sources of the sync stream: SyncStart.Sources, the Source of the sync frames and
	// of CursorAck, Batch.After, the SourceEnd frame, Entry.Source and ConvInfo.Source, and
	// receipts with conv_seq 0 (sources.go). Revision 7 adds edits and reactions. Revision 8
	// adds EpochChanged.Continues: a cursor that holds across a restore from a backup.
	ProtoVersion = 8
)

// Limits. The ones a server may lower or raise are announced in [Welcome.Limits].
const (
	// HeaderLen is the size of a frame header: length (4), version (1), type (1).
	HeaderLen = 6
	// DefaultMaxFrame is the largest frame (version + type + body, the value of the length
	// field) each side accepts until Welcome announces the connection's limit.
	DefaultMaxFrame = 1 << 20
	// MaxFrameLimit is the largest frame any peer may announce or send: AppendFrame refuses
	// longer frames and NewReader lowers larger limits to it.
	MaxFrameLimit = 16 << 20
	// MinFrameLimit is the smallest max_frame a server may announce: a page holding the largest
	// entry fits it (MaxEntryLen(MaxBody) + PageOverhead is about 130.7 KB), so every entry can
	// be sent.
	MinFrameLimit = 128 << 10
	// MaxBody is the largest message body.
	MaxBody = 64 << 10
	// MaxIDLen is the longest user, device, conversation or client message id; see [ValidID].
	MaxIDLen = ident.MaxLen
	// MaxMembers is the most users one CreateGroup, AddMembers, RemoveMembers or SetRole names.
	MaxMembers = 1000
	// MaxInlineMembers is the most members an entry's or a ConvInfo's Members carries; a longer
	// list is left out (MemberCount says how long it was) and paged with [Members].
	MaxInlineMembers = 32
	// MaxPage is the most records (entries or conversations) one frame carries: the cap on
	// SyncStart.MaxBatch, ConvList.Limit, History.Limit and Limits.MaxBatch.
	MaxPage = 1000
	// MaxTokenLen is the longest Hello.Token.
	MaxTokenLen = 4096
	// MaxClientVersionLen is the longest Hello.ClientVersion.
	MaxClientVersionLen = 128
)

// Type is a frame type: the second byte of a frame header. Types are part of the wire format:
// never renumber or reuse one.
type Type uint8

// Frame types, grouped by the stream that carries them.
const (
	// Control stream.
	TypeHello     Type = 1 // client → server: [Hello]
	TypeWelcome   Type = 2 // server → client: [Welcome]
	TypeError     Type = 3 // server → client, any stream: [Error]
	TypeRefresh   Type = 4 // client → server, after Welcome: [Refresh]
	TypeRefreshed Type = 5 // server → client: [Refreshed], the answer to Refresh
	TypeReport    Type = 6 // client → server, after Welcome: [Report] (revision 4), no answer

	// Request streams (each request carries an id that its response repeats).
	TypeSend          Type = 10 // [Send] → [Ack]
	TypeAck           Type = 11 // [Ack], the answer to every mutation
	TypeMarkRead      Type = 12 // [MarkRead] → [Ack]
	TypeRecall        Type = 13 // [Recall] → [Ack]
	TypeCreateGroup   Type = 14 // [CreateGroup] → [Ack]
	TypeAddMembers    Type = 15 // [AddMembers] → [Ack]
	TypeRemoveMembers Type = 16 // [RemoveMembers] → [Ack]
	TypeSetRole       Type = 17 // [SetRole] → [Ack]
	TypeEdit          Type = 18 // [Edit] → [Ack] (revision 7)
	TypeReact         Type = 19 // [React] → [Ack] (revision 7)

	// Sync stream.
	TypeSyncStart    Type = 20 // client → server: [SyncStart]
	TypeBatch        Type = 21 // server → client: [Batch]
	TypeHeartbeat    Type = 22 // server → client: [Heartbeat]
	TypeTooOld       Type = 23 // server → client: [TooOld], ends the stream
	TypeEpochChanged Type = 24 // server → client: [EpochChanged], ends the stream
	TypeRebase       Type = 25 // server → client: [Rebase], ends the stream
	TypeCursorAck    Type = 26 // client → server: [CursorAck]
	TypeStale        Type = 27 // server → client: [Stale] (revision 2)
	TypeSourceEnd    Type = 28 // server → client: [SourceEnd] (revision 6)

	// Queries (request streams).
	TypeConvList        Type = 30 // [ConvList] → [ConvListResult]
	TypeConvListResult  Type = 31
	TypeConvState       Type = 32 // [ConvState] → [ConvStateResult]
	TypeConvStateResult Type = 33
	TypeHistory         Type = 34 // [History] → [HistoryResult]
	TypeHistoryResult   Type = 35
	TypeHeadCheck       Type = 36 // [HeadCheck] → [Head]
	TypeHead            Type = 37
	TypeMembers         Type = 38 // [Members] → [MembersResult]
	TypeMembersResult   Type = 39
	TypeDigest          Type = 40 // [Digest] → [DigestResult] (revision 4)
	TypeDigestResult    Type = 41
	TypeReceipts        Type = 42 // [Receipts] → [ReceiptsResult] (revision 5)
	TypeReceiptsResult  Type = 43
	TypeReaders         Type = 44 // [Readers] → [ReadersResult] (revision 5)
	TypeReadersResult   Type = 45
)

// StreamKind is the role of a QUIC stream. A stream's role is set by its first frame: Hello
// opens the control stream, SyncStart a sync stream, any request a request stream.
type StreamKind uint8

// Stream roles.
const (
	StreamControl StreamKind = 1
	StreamRequest StreamKind = 2
	StreamSync    StreamKind = 3
)

type typeInfo struct {
	name       string
	stream     StreamKind
	fromClient bool
	new        func() Frame
}

var types = [256]typeInfo{
	TypeHello:           {"hello", StreamControl, true, func() Frame { return new(Hello) }},
	TypeWelcome:         {"welcome", StreamControl, false, func() Frame { return new(Welcome) }},
	TypeError:           {"error", 0, false, func() Frame { return new(Error) }},
	TypeRefresh:         {"refresh", StreamControl, true, func() Frame { return new(Refresh) }},
	TypeRefreshed:       {"refreshed", StreamControl, false, func() Frame { return new(Refreshed) }},
	TypeReport:          {"report", StreamControl, true, func() Frame { return new(Report) }},
	TypeSend:            {"send", StreamRequest, true, func() Frame { return new(Send) }},
	TypeAck:             {"ack", StreamRequest, false, func() Frame { return new(Ack) }},
	TypeMarkRead:        {"mark_read", StreamRequest, true, func() Frame { return new(MarkRead) }},
	TypeRecall:          {"recall", StreamRequest, true, func() Frame { return new(Recall) }},
	TypeCreateGroup:     {"create_group", StreamRequest, true, func() Frame { return new(CreateGroup) }},
	TypeAddMembers:      {"add_members", StreamRequest, true, func() Frame { return new(AddMembers) }},
	TypeRemoveMembers:   {"remove_members", StreamRequest, true, func() Frame { return new(RemoveMembers) }},
	TypeSetRole:         {"set_role", StreamRequest, true, func() Frame { return new(SetRole) }},
	TypeEdit:            {"edit", StreamRequest, true, func() Frame { return new(Edit) }},
	TypeReact:           {"react", StreamRequest, true, func() Frame { return new(React) }},
	TypeSyncStart:       {"sync_start", StreamSync, true, func() Frame { return new(SyncStart) }},
	TypeBatch:           {"batch", StreamSync, false, func() Frame { return new(Batch) }},
	TypeHeartbeat:       {"heartbeat", StreamSync, false, func() Frame { return new(Heartbeat) }},
	TypeTooOld:          {"too_old", StreamSync, false, func() Frame { return new(TooOld) }},
	TypeEpochChanged:    {"epoch_changed", StreamSync, false, func() Frame { return new(EpochChanged) }},
	TypeRebase:          {"rebase", StreamSync, false, func() Frame { return new(Rebase) }},
	TypeCursorAck:       {"cursor_ack", StreamSync, true, func() Frame { return new(CursorAck) }},
	TypeStale:           {"stale", StreamSync, false, func() Frame { return new(Stale) }},
	TypeSourceEnd:       {"source_end", StreamSync, false, func() Frame { return new(SourceEnd) }},
	TypeConvList:        {"conv_list", StreamRequest, true, func() Frame { return new(ConvList) }},
	TypeConvListResult:  {"conv_list_result", StreamRequest, false, func() Frame { return new(ConvListResult) }},
	TypeConvState:       {"conv_state", StreamRequest, true, func() Frame { return new(ConvState) }},
	TypeConvStateResult: {"conv_state_result", StreamRequest, false, func() Frame { return new(ConvStateResult) }},
	TypeHistory:         {"history", StreamRequest, true, func() Frame { return new(History) }},
	TypeHistoryResult:   {"history_result", StreamRequest, false, func() Frame { return new(HistoryResult) }},
	TypeHeadCheck:       {"head_check", StreamRequest, true, func() Frame { return new(HeadCheck) }},
	TypeHead:            {"head", StreamRequest, false, func() Frame { return new(Head) }},
	TypeMembers:         {"members", StreamRequest, true, func() Frame { return new(Members) }},
	TypeMembersResult:   {"members_result", StreamRequest, false, func() Frame { return new(MembersResult) }},
	TypeDigest:          {"digest", StreamRequest, true, func() Frame { return new(Digest) }},
	TypeDigestResult:    {"digest_result", StreamRequest, false, func() Frame { return new(DigestResult) }},
	TypeReceipts:        {"receipts", StreamRequest, true, func() Frame { return new(Receipts) }},
	TypeReceiptsResult:  {"receipts_result", StreamRequest, false, func() Frame { return new(ReceiptsResult) }},
	TypeReaders:         {"readers", StreamRequest, true, func() Frame { return new(Readers) }},
	TypeReadersResult:   {"readers_result", StreamRequest, false, func() Frame { return new(ReadersResult) }},
}

// Types returns every frame type this version knows, in ascending order.
func Types() []Type {
	var out []Type
	for t, i := range types {
		if i.new != nil {
			out = append(out, Type(t))
		}
	}
	return out
}

// Known reports whether t is a frame type this version knows.
func (t Type) Known() bool { return types[t].new != nil }

// String returns the snake_case name of t ("send", "sync_start", …) or "type(N)".
func (t Type) String() string {
	if t.Known() {
		return types[t].name
	}
	return "type(" + strconv.Itoa(int(t)) + ")"
}

// Stream returns the role of the stream that carries frames of type t, or 0 for TypeError
// (which any stream may carry) and unknown types.
func (t Type) Stream() StreamKind { return types[t].stream }

// FromClient reports whether frames of type t go from client to server.
func (t Type) FromClient() bool { return types[t].fromClient }

// Frame is one frame body. Every frame type is a struct in this package whose pointer
// implements Frame: *Hello, *Send, *Batch and so on. Frames are plain values, not safe for
// concurrent mutation; the slices in a decoded frame are owned by the caller.
type Frame interface {
	// FrameType returns the frame's type, the header's second byte.
	FrameType() Type
}

// Request is a frame a client sends on a request stream. Its response (Ack, a query result,
// or an Error) carries the same id.
type Request interface {
	Frame
	// RequestID returns the id the client chose: non-zero, and not reused while the request
	// is in flight on its stream.
	RequestID() uint64
	// Validate checks the request without any server state and returns nil or an *Error
	// with CodeInvalidArgument or CodeTooLarge (see each frame for its rules).
	Validate() error
}

// Response is a frame the server sends on a request stream in answer to a Request: Ack,
// ConvListResult, ConvStateResult, HistoryResult, Head, MembersResult, DigestResult,
// ReceiptsResult, ReadersResult or Error.
type Response interface {
	Frame
	// RequestID returns the id of the request answered; 0 in an Error not tied to a request.
	RequestID() uint64
}

// newFrame returns a zero frame of type t, or nil for an unknown type.
func newFrame(t Type) Frame {
	if t.Known() {
		return types[t].new()
	}
	return nil
}
