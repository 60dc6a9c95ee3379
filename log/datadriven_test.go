// Datadriven scripts (testdata/script/*) drive one shard through the commands a state machine
// applies and print what every read answers. Together they pin down, case by case, the named
// guarantees of DESIGN.md §2 as this package implements them:
//
//   - G2 contiguous positions: conv_seq and user-log seq start at 1 and rise by 1 (append,
//     deliver, read scripts); trimming never renumbers (retention).
//   - G3 no silent skip: reads answer entries starting exactly at the requested position, or
//     caught_up / too_old / epoch_changed explicitly, never a clamp (read, retention).
//   - G4 exactly once: resends return the original ack, the dedup key includes the kind, a reused
//     client_msg_id with another payload is a conflict, records expire on the proposer clock
//     (dedup).
//   - G5/G6 fan-out and order: the outbox names each entry's recipients; delivery batches are an
//     ordered, idempotent stream per source (deliver).
//   - G7 isolation: only members send, only the sender recalls (conv, recall).
//
// Run with -rewrite to regenerate the expected output after an intended change.
//
// Commands (index defaults to the applied index + 1; time is sticky: it defaults to the last
// time given in the file, initially 1000). A command whose index is already applied is skipped
// exactly as the state machine skips a replayed Raft entry.
//
//	append [index] [time] conv sender cmid kind [body] [members=a,b] [target=s.i.n] [upto]
//	       [dedup-window] [recall-window] [role=member|admin|owner] [max-group]
//	deliver [index] [time] source prev last      input: one item per line
//	        pos=N users=a,b conv=c convseq=N msgid=s.i.n kind=k sender=u [time] [body] [upto]
//	        [target] [members]
//	deliver-outbox [index] [time] prev last      batch (prev, last] built from this shard's outbox
//	read-user uid from [epoch] [count] [bytes]
//	read-conv conv from [epoch] [count] [bytes]
//	read-conv-before conv before [count] [bytes]
//	user-info uid | conv-info conv | source-mark source
//	conv-state conv uid | members conv uid [after] [limit]   a member's view; paged members
//	outbox from [limit] | trim-outbox [index] upto
//	trim-user [index] [time] uid [max-count] [max-age] [min-age] [inactive-after] | trim-conv … conv …
//	reset-user [index] [time] uid
//	set-cursor [index] [time] uid dev epoch pos | cursors uid     a cursor is seen at its time
//	checksum uid from to
//	dead-letter [index] [time] dest pos users reason | drop-dead-letter dest pos
//	dead-letters [dest pos] [limit]                list after (dest, pos), and the count
//	redeliver [index] [time] source + one item line  replay one dead-lettered item
//	state                                        applied index, key count and keys per table
package log

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/script", func(t *testing.T, path string) {
		r := &ddRunner{s: newMemShard(t, testShardID), clock: 1000}
		datadriven.RunTest(t, path, r.run)
	})
}

type ddRunner struct {
	s     *Shard
	clock int64
}

func (r *ddRunner) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "append":
		req := parseAppend(t, d)
		return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) {
			res, err := tx.Append(st, &req)
			return fmtResult(res), err
		}, true)
	case "deliver":
		b := &DeliveryBatch{}
		d.ScanArgs(t, "source", &b.Source)
		d.ScanArgs(t, "prev", &b.Prev)
		d.ScanArgs(t, "last", &b.Last)
		for _, line := range strings.Split(d.Input, "\n") {
			if line = strings.TrimSpace(line); line != "" {
				b.Items = append(b.Items, parseDelivery(t, line))
			}
		}
		return r.deliver(t, d, b)
	case "deliver-outbox":
		var prev, last uint64
		d.ScanArgs(t, "prev", &prev)
		d.ScanArgs(t, "last", &last)
		var only string
		d.MaybeScanArgs(t, "users", &only)
		return r.deliver(t, d, outboxBatch(t, r.s, prev, last, splitList(only)...))
	case "user-groups":
		var uids string
		d.ScanArgs(t, "uids", &uids)
		ids := splitList(uids)
		counts, err := r.s.UserGroups(ids)
		if err != nil {
			return fmtErr(err)
		}
		var b strings.Builder
		for i, uid := range ids {
			fmt.Fprintf(&b, "%s %d\n", uid, counts[i])
		}
		return b.String()
	case "read-user", "read-conv":
		var id string
		var from Position
		var epoch Epoch
		var lim Limit
		d.ScanArgs(t, map[string]string{"read-user": "uid", "read-conv": "conv"}[d.Cmd], &id)
		id = unquote(t, id)
		d.ScanArgs(t, "from", &from)
		d.MaybeScanArgs(t, "epoch", &epoch)
		d.MaybeScanArgs(t, "count", &lim.Count)
		d.MaybeScanArgs(t, "bytes", &lim.Bytes)
		read := r.s.ReadUser
		if d.Cmd == "read-conv" {
			read = r.s.ReadConv
		}
		res, err := read(id, epoch, from, lim)
		if err != nil {
			return fmtErr(err)
		}
		return fmtRead(res)
	case "read-conv-before":
		var conv string
		var before Position
		var lim Limit
		d.ScanArgs(t, "conv", &conv)
		d.ScanArgs(t, "before", &before)
		d.MaybeScanArgs(t, "count", &lim.Count)
		d.MaybeScanArgs(t, "bytes", &lim.Bytes)
		res, err := r.s.ReadConvBefore(conv, before, lim)
		if err != nil {
			return fmtErr(err)
		}
		return fmtRead(res)
	case "conv-state":
		var conv, uid string
		d.ScanArgs(t, "conv", &conv)
		d.ScanArgs(t, "uid", &uid)
		st, err := r.s.Conversation(conv, uid)
		if err != nil {
			return fmtErr(err)
		}
		return fmt.Sprintf("kind=%d head=%d members=%s count=%d role=%s read=%d\n", st.Kind, st.Info.Head,
			strings.Join(st.Members, ","), st.MemberCount, st.Role, st.ReadMark)
	case "members":
		var conv, uid, after string
		limit := 100
		d.ScanArgs(t, "conv", &conv)
		d.ScanArgs(t, "uid", &uid)
		d.MaybeScanArgs(t, "after", &after)
		d.MaybeScanArgs(t, "limit", &limit)
		page, more, err := r.s.MembersAfter(conv, uid, after, limit)
		if err != nil {
			return fmtErr(err)
		}
		var b strings.Builder
		for _, m := range page {
			fmt.Fprintf(&b, "%s %s\n", m.User, m.Role)
		}
		fmt.Fprintf(&b, "more=%v\n", more)
		return b.String()
	case "user-info", "conv-info":
		var id string
		var info LogInfo
		var err error
		if d.Cmd == "user-info" {
			d.ScanArgs(t, "uid", &id)
			info, err = r.s.UserInfo(id)
		} else {
			d.ScanArgs(t, "conv", &id)
			info, err = r.s.ConvInfo(id)
		}
		if err != nil {
			return fmtErr(err)
		}
		return fmt.Sprintf("epoch=%d first=%d head=%d", info.Epoch, info.First, info.Head)
	case "source-mark":
		var src ShardID
		d.ScanArgs(t, "source", &src)
		mark, err := r.s.SourceMark(src)
		if err != nil {
			return fmtErr(err)
		}
		return fmt.Sprintf("mark=%d", mark)
	case "outbox":
		var from uint64
		limit := 0
		d.ScanArgs(t, "from", &from)
		d.MaybeScanArgs(t, "limit", &limit)
		return r.outbox(t, from, limit)
	case "trim-outbox":
		var upTo uint64
		d.ScanArgs(t, "upto", &upTo)
		return r.tx(t, d, func(tx *Tx, _ Stamp) (string, error) { return "ok", tx.TrimOutbox(upTo) }, false)
	case "trim-user", "trim-conv":
		var id string
		var ret Retention
		d.MaybeScanArgs(t, "max-count", &ret.MaxCount)
		d.MaybeScanArgs(t, "max-age", &ret.MaxAge)
		d.MaybeScanArgs(t, "min-age", &ret.MinAge)
		d.MaybeScanArgs(t, "inactive-after", &ret.InactiveAfter)
		trim := (*Tx).TrimUser
		if d.Cmd == "trim-user" {
			d.ScanArgs(t, "uid", &id)
		} else {
			d.ScanArgs(t, "conv", &id)
			trim = (*Tx).TrimConv
		}
		return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) {
			first, err := trim(tx, st, id, ret)
			return fmt.Sprintf("first=%d", first), err
		}, false)
	case "reset-user":
		var uid string
		d.ScanArgs(t, "uid", &uid)
		return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) {
			epoch, err := tx.ResetUser(st, uid)
			return fmt.Sprintf("epoch=%d", epoch), err
		}, false)
	case "set-cursor":
		var uid, dev string
		var c Cursor
		d.ScanArgs(t, "uid", &uid)
		d.ScanArgs(t, "dev", &dev)
		uid, dev = unquote(t, uid), unquote(t, dev)
		d.ScanArgs(t, "epoch", &c.Epoch)
		d.ScanArgs(t, "pos", &c.Pos)
		return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) { return "ok", tx.SetCursor(st, uid, dev, c) }, false)
	case "cursors":
		var uid string
		d.ScanArgs(t, "uid", &uid)
		cs, err := r.s.Cursors(uid)
		if err != nil {
			return fmtErr(err)
		}
		if len(cs) == 0 {
			return "none"
		}
		var lines []string
		for _, c := range cs {
			lines = append(lines, fmt.Sprintf("%s: pos=%d epoch=%d seen=%d", c.Device, c.Cursor.Pos, c.Cursor.Epoch, c.Seen))
		}
		return strings.Join(lines, "\n")
	case "checksum":
		var uid string
		var from, to Position
		d.ScanArgs(t, "uid", &uid)
		d.ScanArgs(t, "from", &from)
		d.ScanArgs(t, "to", &to)
		sum, err := r.s.Checksum(uid, from, to)
		if err != nil {
			return fmtErr(err)
		}
		return fmt.Sprintf("%016x", sum)
	case "dead-letter":
		req := DeadLetterAdd{}
		var users string
		d.ScanArgs(t, "dest", &req.Dest)
		d.ScanArgs(t, "pos", &req.Pos)
		d.ScanArgs(t, "users", &users)
		d.ScanArgs(t, "reason", &req.Reason)
		d.MaybeScanArgs(t, "code", &req.Code)
		d.MaybeScanArgs(t, "next", &req.NextTry)
		req.Users = strings.Split(users, ",")
		req.Reason = unquote(t, req.Reason)
		return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) { return "ok", tx.AddDeadLetter(st, &req) }, false)
	case "attempt-dead-letter":
		req := DeadLetterAttempt{}
		d.ScanArgs(t, "dest", &req.Dest)
		d.ScanArgs(t, "pos", &req.Pos)
		d.ScanArgs(t, "attempt", &req.Attempt)
		d.ScanArgs(t, "code", &req.Code)
		d.ScanArgs(t, "reason", &req.Reason)
		d.MaybeScanArgs(t, "next", &req.NextTry)
		req.Reason = unquote(t, req.Reason)
		return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) { return "ok", tx.AttemptDeadLetter(st, &req) }, false)
	case "archive-dead-letter":
		req := DeadLetterArchive{}
		d.ScanArgs(t, "dest", &req.Dest)
		d.ScanArgs(t, "pos", &req.Pos)
		return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) { return "ok", tx.ArchiveDeadLetter(st, &req) }, false)
	case "drop-dead-letter":
		req := DeadLetterDrop{Archived: d.HasArg("archived")}
		d.ScanArgs(t, "dest", &req.Dest)
		d.ScanArgs(t, "pos", &req.Pos)
		return r.tx(t, d, func(tx *Tx, _ Stamp) (string, error) { return "ok", tx.DropDeadLetter(&req) }, false)
	case "dead-letters":
		var dest ShardID
		var pos uint64
		limit := 0
		d.MaybeScanArgs(t, "dest", &dest)
		d.MaybeScanArgs(t, "pos", &pos)
		d.MaybeScanArgs(t, "limit", &limit)
		read, count := r.s.DeadLetters, r.s.DeadLetterCount
		if d.HasArg("archived") {
			read = r.s.ArchivedDeadLetters
			count = func() (uint64, error) { st, err := r.s.DeadLetterStats(); return st.Archived, err }
		}
		dls, err := read(dest, pos, limit)
		if err != nil {
			return fmtErr(err)
		}
		n, err := count()
		if err != nil {
			return fmtErr(err)
		}
		lines := []string{fmt.Sprintf("count=%d", n)}
		for _, dl := range dls {
			line := fmt.Sprintf("%d/%d to %s at %d: %s %s/%d %q (%s)", dl.Dest, dl.Pos,
				strings.Join(dl.Users, ","), dl.FailedAt, dl.Entry.MsgID, dl.Entry.Conv, dl.Entry.ConvSeq, dl.Entry.Body, dl.Reason)
			if dl.Code != 0 || dl.Attempts != 0 || dl.NextTry != 0 || dl.ArchivedAt != 0 {
				line += fmt.Sprintf(" class=%s code=%d attempts=%d last=%d next=%d archived=%d gave_up=%v",
					dl.Class(), dl.Code, dl.Attempts, dl.LastTry, dl.NextTry, dl.ArchivedAt, dl.GaveUp())
			}
			lines = append(lines, line)
		}
		return strings.Join(lines, "\n")
	case "dead-letter-stats":
		st, err := r.s.DeadLetterStats()
		if err != nil {
			return fmtErr(err)
		}
		var by []string
		for _, c := range DeadLetterClasses {
			by = append(by, fmt.Sprintf("%s=%d", c, st.ByClass[c]))
		}
		return fmt.Sprintf("held=%d %s gave_up=%d archived=%d", st.Held, strings.Join(by, " "), st.GaveUp, st.Archived)
	case "redeliver":
		req := Redelivery{}
		d.ScanArgs(t, "source", &req.Source)
		req.Item = parseDelivery(t, strings.TrimSpace(d.Input))
		return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) {
			n, err := tx.Redeliver(st, &req)
			return fmt.Sprintf("appended=%d", n), err
		}, false)
	case "state":
		applied, err := r.s.Applied()
		if err != nil {
			return fmtErr(err)
		}
		_, n, err := r.s.StateChecksum()
		if err != nil {
			return fmtErr(err)
		}
		return fmt.Sprintf("applied=%d keys=%d\n%s", applied, n, tableCounts(t, r.s))
	default:
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	}
}

// tx applies op as one command. With showOutbox, a command that wrote an outbox record also
// prints the record's position and recipients.
func (r *ddRunner) tx(t *testing.T, d *datadriven.TestData, op func(*Tx, Stamp) (string, error), showOutbox bool) string {
	t.Helper()
	applied, err := r.s.Applied()
	if err != nil {
		t.Fatal(err)
	}
	st := Stamp{Index: applied + 1}
	d.MaybeScanArgs(t, "index", &st.Index)
	d.MaybeScanArgs(t, "time", &r.clock)
	st.Time = r.clock
	before, err := r.s.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	var out string
	skipped, opErr := apply(t, r.s, st, func(tx *Tx) error {
		var err error
		out, err = op(tx, st)
		return err
	})
	switch {
	case skipped:
		return fmt.Sprintf("skipped: index %d already applied", st.Index)
	case opErr != nil:
		return fmtErr(opErr)
	}
	after, err := r.s.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	if showOutbox && after.Head != before.Head {
		items, err := r.s.ReadOutbox(after.Head, 1)
		if err != nil || len(items) != 1 {
			t.Fatalf("read outbox %d: %v %v", after.Head, items, err)
		}
		out += fmt.Sprintf("\noutbox %d to %s", items[0].Pos, strings.Join(items[0].Recipients, ","))
	}
	return out
}

func (r *ddRunner) deliver(t *testing.T, d *datadriven.TestData, b *DeliveryBatch) string {
	return r.tx(t, d, func(tx *Tx, st Stamp) (string, error) {
		res, err := tx.Deliver(st, b)
		return fmt.Sprintf("mark=%d appended=%d", res.Mark, res.Appended), err
	}, false)
}

func (r *ddRunner) outbox(t *testing.T, from uint64, limit int) string {
	info, err := r.s.Outbox()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "first=%d head=%d", info.First, info.Head)
	items, err := r.s.ReadOutbox(from, limit)
	if err != nil {
		return b.String() + "\n" + fmtErr(err)
	}
	for _, it := range items {
		fmt.Fprintf(&b, "\npos=%d to=%s %s", it.Pos, strings.Join(it.Recipients, ","), fmtEntry(&it.Entry))
	}
	return b.String()
}

func parseKind(t *testing.T, s string) Kind {
	for k := KindMessage; k.Valid(); k++ {
		if k.String() == s {
			return k
		}
	}
	if n, err := strconv.Atoi(s); err == nil {
		return Kind(n) // lets a script send an unknown kind
	}
	t.Fatalf("unknown kind %q", s)
	return 0
}

func parseMsgID(t *testing.T, s string) MsgID {
	id, err := ParseMsgID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// unquote lets a script write ids with characters the directive syntax cannot hold, as a Go
// quoted string: sender="a\x00b".
func unquote(t *testing.T, s string) string {
	if !strings.HasPrefix(s, `"`) {
		return s
	}
	u, err := strconv.Unquote(s)
	if err != nil {
		t.Fatalf("bad quoted value %s: %v", s, err)
	}
	return u
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func parseAppend(t *testing.T, d *datadriven.TestData) Append {
	var req Append
	var kind, target, members string
	var body string
	d.ScanArgs(t, "conv", &req.Conv)
	d.ScanArgs(t, "sender", &req.Sender)
	d.ScanArgs(t, "cmid", &req.ClientMsgID)
	d.ScanArgs(t, "kind", &kind)
	req.Conv, req.Sender, req.ClientMsgID = unquote(t, req.Conv), unquote(t, req.Sender), unquote(t, req.ClientMsgID)
	req.Kind = parseKind(t, kind)
	if d.MaybeScanArgs(t, "body", &body) {
		req.Body = []byte(unquote(t, body))
	}
	if d.MaybeScanArgs(t, "members", &members) {
		req.Members = splitList(members)
		for i, m := range req.Members {
			req.Members[i] = unquote(t, m)
		}
	}
	if d.MaybeScanArgs(t, "target", &target) {
		req.Target = parseMsgID(t, target)
	}
	d.MaybeScanArgs(t, "upto", &req.ReadUpTo)
	d.MaybeScanArgs(t, "dedup-window", &req.DedupWindow)
	d.MaybeScanArgs(t, "recall-window", &req.RecallWindow)
	d.MaybeScanArgs(t, "max-group", &req.MaxGroupSize)
	var role string
	if d.MaybeScanArgs(t, "role", &role) {
		req.Role = parseRole(t, role)
	}
	return req
}

func parseRole(t *testing.T, s string) Role {
	for r := RoleMember; r <= RoleOwner; r++ {
		if r.String() == s {
			return r
		}
	}
	t.Fatalf("unknown role %q", s)
	return 0
}

// parseDelivery parses "pos=1 users=a,b conv=c convseq=1 msgid=1.5.0 kind=message sender=a …".
func parseDelivery(t *testing.T, line string) Delivery {
	var it Delivery
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("bad item field %q in %q", f, line)
		}
		u := func() uint64 {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("bad %s in %q: %v", k, line, err)
			}
			return n
		}
		switch k {
		case "pos":
			it.Pos = u()
		case "users":
			it.Users = splitList(v)
		case "conv":
			it.Entry.Conv = v
		case "convseq":
			it.Entry.ConvSeq = Position(u())
		case "msgid":
			it.Entry.MsgID = parseMsgID(t, v)
		case "kind":
			it.Entry.Kind = parseKind(t, v)
		case "sender":
			it.Entry.Sender = v
		case "time":
			it.Entry.Time = int64(u())
		case "body":
			it.Entry.Body = []byte(v)
		case "upto":
			it.Entry.ReadUpTo = Position(u())
		case "target":
			it.Entry.Target = parseMsgID(t, v)
		case "members":
			it.Entry.Members = splitList(v)
		default:
			t.Fatalf("unknown item field %q in %q", k, line)
		}
	}
	return it
}
