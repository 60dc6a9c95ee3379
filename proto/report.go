package proto

import "strconv"

// ReportKind says what a client reports in a [Report]. Wire values: never renumber them.
type ReportKind uint8

// Report kinds.
const (
	// ReportGap: a Batch did not continue the stored cursor (its epoch was not the stored one,
	// or its first seq was not the stored position + 1), so the client stored none of it and
	// restarted the sync (§8.4).
	ReportGap ReportKind = 1
	// ReportMismatch: the digest of a range the client stored differs from the server's
	// ([DigestResult]), so the client refetches the range (§8.7).
	ReportMismatch ReportKind = 2
)

// String returns "gap", "mismatch" or "report_kind(N)".
func (k ReportKind) String() string {
	switch k {
	case ReportGap:
		return "gap"
	case ReportMismatch:
		return "mismatch"
	}
	return "report_kind(" + strconv.Itoa(int(k)) + ")"
}

// Valid reports whether k is a kind this version knows.
func (k ReportKind) Valid() bool { return k == ReportGap || k == ReportMismatch }

// Report tells the server, on the control stream after Welcome, that the client found its copy
// of a log wrong: a gap in a Batch or a digest mismatch. The server counts it
// (syncd_client_gaps_total, syncd_client_digest_mismatches_total) and logs it with the user and
// device, at most a few a minute per device (more are dropped without an answer: send one per
// incident, never again for the same one). It answers nothing, except an Error with id 0 when
// Validate fails (the session goes on). Revision 4.
type Report struct {
	Kind ReportKind `msgpack:"kind"` // gap or mismatch
	Conv string     `msgpack:"conv"` // the conversation whose history it concerns; "" = the user's own log
	// Sub is the sub-log of the user's stream (revision 3; the user log only): 0 = the user log.
	Sub   uint32 `msgpack:"sub"`
	Epoch Epoch  `msgpack:"epoch"` // the log's epoch as the client stored it (0 if it had none)
	// From is, for a gap, the position the client expected (its stored position + 1); for a
	// mismatch, the first position of the range whose digest differed. At least 1.
	From Position `msgpack:"from"`
	// To is, for a gap, the seq of the first entry the Batch carried instead (0: it carried
	// none); for a mismatch, the last position of the range (at least From).
	To Position `msgpack:"to"`
}

// FrameType implements Frame.
func (*Report) FrameType() Type { return TypeReport }

// Validate checks the kind, the log named (a valid conversation id, or a sub-log below
// MaxSubLogs of the user log) and the range (From at least 1; for a mismatch To at least From),
// all with CodeInvalidArgument.
func (r *Report) Validate() error {
	if !r.Kind.Valid() {
		return invalid("report of kind %d: known kinds are 1 (gap) and 2 (mismatch)", r.Kind)
	}
	if err := checkScope(r.Conv, r.Sub); err != nil {
		return err
	}
	switch {
	case r.From == 0:
		return invalid("report from position 0: positions start at 1")
	case r.Kind == ReportMismatch && r.To < r.From:
		return invalid("mismatch over the range %d..%d: to is below from", r.From, r.To)
	}
	return nil
}
