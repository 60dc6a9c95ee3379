package test

// The checker of the fault suite. After the faults are healed and the traffic stopped it waits
// for the cluster and the devices to converge, then checks the guarantees of DESIGN.md on what
// the devices stored and, once every node is stopped, on every node's store:
//
//   - every acked message is in every member device's store exactly once, at its acked conv_seq
//     with its acked msg_id (G1, G4, G5);
//   - every member's store shows each conversation in the same order, the conversation's order,
//     and each sender's messages in the order it queued them (G6);
//   - nothing appears that no device queued;
//   - every device stored its user's log contiguously from position 1 (a GapEvent the SDK
//     repaired is fine; a rebase or an epoch change would mean entries were skipped);
//   - on every node, every user log and conversation log is contiguous from 1 and holds exactly
//     what the devices stored (G2), each shard's state checksum is the same on every replica,
//     and no shard holds a dead letter.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc64"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// checkAll runs the whole check after a fault schedule: stop the traffic, wait until every
// mutation is acked or failed and every device has converged, check the devices, close them,
// wait for the replicas to apply the same index, stop every node with SIGTERM and check their
// stores. settle bounds each wait; it is generous because a device may be in a reconnect backoff
// when the last fault heals.
func checkAll(w *workload, settle time.Duration) {
	w.t.Helper()
	c := w.c
	w.Stop()
	for _, n := range c.nodes { // a schedule may end with a node down: bring it back first
		if !n.Running() && !n.retired && n.Starts() > 0 {
			if err := n.Start(); err != nil {
				w.t.Fatal(err)
			}
			w.tl.add("%s restarted for the check", n.ID)
		}
	}
	c.waitReady(settle)
	testkit.Wait(w.t, settle, "every queued mutation to be acked or failed", func() (bool, string) {
		u := w.unsettled()
		return len(u) == 0, fmt.Sprintf("%d unsettled: %v", len(u), u[:min(len(u), 10)])
	})
	w.waitConverged(settle)
	w.checkDevices()
	w.Close()
	c.waitReplicasCaughtUp(settle)
	c.terminateAll()
	c.checkLogs()
	w.checkStores()
	if c.mesh != nil {
		w.t.Logf("relays: %s", c.mesh.Summary())
	}
}

// convView is one device's stored messages of one conversation: (conv_seq, msg_id, body).
type convView []string

// view returns device d's stored messages of conv, one "conv_seq msg_id body" line each.
func (w *workload) view(d *wlDevice, conv string) (convView, []client.Message, error) {
	msgs, err := d.cl.Messages(conv)
	if err != nil {
		return nil, nil, err
	}
	out := make(convView, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, fmt.Sprintf("%d %s %s", m.ConvSeq, m.MsgID, m.Body))
	}
	return out, msgs, nil
}

// waitConverged waits until every device has stored its user's whole log (up to the head every
// node reports), every shard's outbox is delivered (fan-out lag 0 on its leader), every acked
// message is in every member's store, and the members of each conversation store the same
// messages.
func (w *workload) waitConverged(timeout time.Duration) {
	w.t.Helper()
	start := time.Now()
	testkit.Wait(w.t, timeout, "the devices to converge", func() (bool, string) {
		for shard, leader := range w.c.leaders() {
			stats, err := w.c.scrape(leader)
			if err != nil {
				return false, err.Error()
			}
			if st := stats[shard]; st == nil || st.Lag != 0 {
				return false, fmt.Sprintf("shard %d: fan-out lag on its leader %s: %+v", shard, leader.ID, st)
			}
		}
		for _, d := range w.devs {
			head := uint64(0)
			for i := range max(w.split[d.user], 1) { // every sub-log of a split user's stream
				h, err := w.serverHead(log.SubLog(d.user, i))
				if err != nil {
					return false, err.Error()
				}
				head += h
			}
			d.mu.Lock()
			stored := len(d.entries)
			d.mu.Unlock()
			if uint64(stored) != head {
				return false, fmt.Sprintf("%s stored %d entries, its log's head is %d", d.user, stored, head)
			}
		}
		for _, cv := range w.convs {
			var ref convView
			for i, u := range cv.members {
				v, _, err := w.view(w.device(u), cv.id)
				if err != nil {
					return false, err.Error()
				}
				if missing := w.missingAcks(cv.id, v); len(missing) > 0 {
					return false, fmt.Sprintf("%s lacks %d acked messages of %s, first %s", u, len(missing), cv.id, missing[0])
				}
				if i == 0 {
					ref = v
				} else if !slices.Equal(v, ref) {
					return false, fmt.Sprintf("%s: %s stores %d messages, %s %d", cv.id, cv.members[0], len(ref), u, len(v))
				}
			}
		}
		return true, ""
	})
	w.tl.add("devices converged in %v", time.Since(start).Round(10*time.Millisecond))
}

// serverHead returns the highest head of user's log among the serving nodes' replicas (from the
// admin endpoint /v1/cursors).
func (w *workload) serverHead(user string) (uint64, error) {
	var head uint64
	answered := false
	for _, n := range w.c.nodes {
		if !n.Serving() {
			continue
		}
		code, body, err := w.c.get(n, "/v1/cursors?user="+url.QueryEscape(user))
		if err != nil || code != 200 {
			continue
		}
		var ans struct {
			Head uint64 `json:"head"`
		}
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			return 0, fmt.Errorf("%s /v1/cursors: %v: %s", n.ID, err, body)
		}
		head, answered = max(head, ans.Head), true
	}
	if !answered {
		return 0, fmt.Errorf("no node answered /v1/cursors for %s", user)
	}
	return head, nil
}

// missingAcks returns the acked messages of conv that view lacks (at their acked conv_seq with
// their msg_id and body).
func (w *workload) missingAcks(conv string, view convView) []string {
	have := map[string]bool{}
	for _, line := range view {
		have[line] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.msgs {
		if m.conv == conv && m.kind == proto.KindMessage && m.ack != nil {
			if line := fmt.Sprintf("%d %s %s", m.ack.ConvSeq, m.ack.MsgID, m.body); !have[line] {
				out = append(out, line)
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkDevices checks what the devices stored against what was queued and acked.
func (w *workload) checkDevices() {
	t := w.t
	t.Helper()
	w.mu.Lock()
	bad := slices.Clone(w.bad)
	w.mu.Unlock()
	for _, b := range bad {
		t.Errorf("recording: %s", b)
	}
	var acked, failed, storedUnacked, checkedMsgs, entries, gaps int
	w.mu.Lock()
	for _, m := range w.msgs {
		switch {
		case m.ack != nil:
			acked++
		case m.failed != "":
			failed++
		}
	}
	w.mu.Unlock()

	w.final = map[string]convView{}
	for _, cv := range w.convs {
		for i, u := range cv.members {
			d := w.device(u)
			v, msgs, err := w.view(d, cv.id)
			if err != nil {
				t.Fatal(err)
			}
			checkedMsgs += len(msgs)
			unacked, problems := w.checkView(d, cv, msgs)
			for _, p := range problems {
				t.Error(p)
			}
			if i == 0 {
				w.final[cv.id] = v
				storedUnacked += unacked
			}
		}
	}
	for _, d := range w.devs {
		d.mu.Lock()
		entries += len(d.entries)
		gaps += len(d.gaps)
		for _, p := range w.checkEntries(d) {
			t.Error(p)
		}
		if len(d.gaps) > 0 {
			w.tl.add("%s: %d gaps, repaired by the SDK, at %v", d.user, len(d.gaps), d.gaps)
		}
		d.mu.Unlock()
	}
	w.tl.add("devices checked: %d mutations acked, %d failed; %d stored messages checked (%d of them from sends "+
		"whose ack was lost); %d log entries stored by the devices, %d gaps repaired by the SDK",
		acked, failed, checkedMsgs, storedUnacked, entries, gaps)
	if failed > 0 {
		t.Errorf("%d mutations failed (retries exhausted or refused): a healed cluster should take them all", failed)
	}
}

// checkView checks one member device's stored messages of one conversation: each once, each
// queued by a device for this conversation and with this sender, acked ones at their ack and
// none missing, each sender's in queue order. It returns how many stored messages were never
// acked, and every problem found.
func (w *workload) checkView(d *wlDevice, cv *wlConv, msgs []client.Message) (unacked int, problems []string) {
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s's store of %s: ", d.user, cv.id)+fmt.Sprintf(format, args...))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]proto.Position{} // body → conv_seq
	lastOf := map[string]*wlMsg{}       // sender → its latest stored message so far
	for i, m := range msgs {
		if i > 0 && m.ConvSeq <= msgs[i-1].ConvSeq {
			bad("conv_seq %d after %d", m.ConvSeq, msgs[i-1].ConvSeq)
		}
		body := string(m.Body)
		if prev, dup := seen[body]; dup {
			bad("%q twice, at conv_seq %d and %d (G4)", body, prev, m.ConvSeq)
		}
		seen[body] = m.ConvSeq
		q := w.byBody[body]
		if q == nil || q.conv != cv.id || q.sender != m.Sender {
			bad("conv_seq %d %s from %s %q was never queued there by that sender", m.ConvSeq, m.MsgID, m.Sender, body)
			continue
		}
		if q.ack == nil {
			unacked++
		} else if q.ack.MsgID != m.MsgID || q.ack.ConvSeq != m.ConvSeq {
			bad("%q at conv_seq %d as %s, acked at %d as %s (G1)", body, m.ConvSeq, m.MsgID, q.ack.ConvSeq, q.ack.MsgID)
		}
		if p := lastOf[q.sender]; p != nil && p.n > q.n {
			if q.ack != nil && p.queued.After(q.acked) {
				bad("%q (conv_seq %d) was acked at %s, before its sender queued %q (at %s), yet it comes after it (G6)",
					body, m.ConvSeq, w.since(q.acked), p.body, w.since(p.queued))
			} else {
				// The server's G6 only orders a message acked before the later send. The SDK
				// promises more: its outbox sends one mutation at a time, in queue order.
				bad("%q (queued %s, acked %s; %s) is stored after %q (queued %s, acked %s; %s), which its sender "+
					"queued later: the SDK's outbox sent the later message before the earlier one was acked",
					body, w.since(q.queued), w.since(q.acked), w.attempts(q), p.body, w.since(p.queued), w.since(p.acked), w.attempts(p))
			}
		}
		lastOf[q.sender] = q
	}
	var missing []string
	for _, q := range w.msgs {
		if q.conv == cv.id && q.kind == proto.KindMessage && q.ack != nil {
			if _, ok := seen[q.body]; !ok {
				missing = append(missing, fmt.Sprintf("%q (conv_seq %d, %s)", q.body, q.ack.ConvSeq, q.ack.MsgID))
			}
		}
	}
	slices.Sort(missing)
	for _, m := range missing {
		bad("lacks acked %s (G1/G5)", m)
	}
	return unacked, problems
}

// since formats t as the time since the test started ("-" for the zero time).
func (w *workload) since(t time.Time) string {
	if t.IsZero() || w.tl == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fs", t.Sub(w.tl.start).Seconds())
}

// attempts describes what the sender's SDK recorded about m: attempts and the last error.
// REQUIRES: w.mu (only reads the device list, fixed after newWorkload).
func (w *workload) attempts(m *wlMsg) string {
	for _, d := range w.devs {
		if d.user == m.sender && d.cl != nil {
			q, ok, err := d.cl.Lookup(m.cmid)
			if err != nil || !ok {
				return fmt.Sprintf("lookup: %v %v", ok, err)
			}
			return fmt.Sprintf("%d attempts, last error %q", q.Attempts, q.LastError)
		}
	}
	return "no device"
}

// checkEntries checks the entries device d stored, in the order it stored them: positions 1, 2,
// 3… (in each sub-log of a split user's stream) with no rebase or epoch change, each msg_id once,
// only entries of its conversations, and within each conversation conv_seq 1, 2, 3… (every member
// gets every entry of its conversations, in their order, across a split too). A group's
// delivery reports (kind delivered) go to the senders they are about, not to every member, so in a
// group a forward jump is noted in w.skipped and checkConvLog checks that every position jumped
// over holds such a report. It returns every problem found.
// REQUIRES: d.mu.
func (w *workload) checkEntries(d *wlDevice) (problems []string) {
	bad := func(format string, args ...any) {
		problems = append(problems, d.user+": "+fmt.Sprintf(format, args...))
	}
	for _, r := range d.rebases {
		bad("rebase to %+v: entries were skipped", r)
	}
	for _, e := range d.epochs {
		bad("epoch changed to %d", e.Epoch)
	}
	ids := map[proto.MsgID]proto.Position{}
	next := map[string]proto.Position{} // conv → last conv_seq stored
	at := map[uint32]proto.Position{}   // sub-log → last position stored
	for i, e := range d.entries {
		sub := d.subs[i]
		if at[sub]++; e.Seq != at[sub] {
			bad("entry %d of sub-log %d stored at position %d (G2/G3)", at[sub], sub, e.Seq)
			return problems
		}
		if prev, dup := ids[e.MsgID]; dup {
			bad("msg_id %s stored twice, at %d and %d (G4/G5)", e.MsgID, prev, e.Seq)
		}
		ids[e.MsgID] = e.Seq
		cv := w.conv(e.Conv)
		if cv == nil || !slices.Contains(cv.members, d.user) {
			bad("entry %d of conversation %q it is not a member of (G7)", e.Seq, e.Conv)
			continue
		}
		want := next[e.Conv] + 1
		switch {
		case e.ConvSeq == want:
		case e.ConvSeq > want && cv.creator != "": // a group: checkConvLog checks what was jumped over
			if w.skipped == nil {
				w.skipped = map[string]map[proto.Position]string{}
			}
			if w.skipped[e.Conv] == nil {
				w.skipped[e.Conv] = map[proto.Position]string{}
			}
			for p := want; p < e.ConvSeq; p++ {
				w.skipped[e.Conv][p] = d.user
			}
		default:
			bad("entry %d is %s/%d, want conv_seq %d next (G5/G6)", e.Seq, e.Conv, e.ConvSeq, want)
		}
		next[e.Conv] = e.ConvSeq
	}
	// A large group's entries come from its own log (a source): contiguous from the entry of
	// the user's log that started the following (the workload removes nobody), each msg_id once
	// across the user's log and its sources.
	for conv, es := range d.sourced {
		at := next[conv] // the user log's last entry of it: the creation, or the add that made it large
		if at == 0 {
			bad("entries of source %s, whose start is not in the user's log (G3)", conv)
			continue
		}
		for _, e := range es {
			if e.ConvSeq != at+1 || e.Conv != conv {
				bad("source %s: %s/%d stored after %d (G2/G3)", conv, e.Conv, e.ConvSeq, at)
				break
			}
			at = e.ConvSeq
			if prev, dup := ids[e.MsgID]; dup {
				bad("msg_id %s stored twice, at %d and from source %s (G4/G5)", e.MsgID, prev, conv)
			}
			ids[e.MsgID] = e.ConvSeq
		}
	}
	return problems
}

// shardReplica is what one node's store holds for one shard.
type shardReplica struct {
	applied           uint64
	sum, keys         uint64 // StateChecksum
	sumWithoutApplied uint64 // the same without the applied-index metadata
	deadLetters       uint64
	outbox            log.OutboxInfo
}

// checkStores opens every (stopped) node's store and checks the logs and the replicas.
func (w *workload) checkStores() {
	t := w.t
	t.Helper()
	slots := cluster.Even(clusterShards) // the servers' routing: a new cluster's even slot table
	replicas := map[raftstore.ShardID]map[string]shardReplica{}
	userEntries, convEntries := 0, 0
	for _, n := range w.c.nodes {
		db, err := pebble.Open(filepath.Join(n.Dir, "db"), &pebble.Options{ReadOnly: true,
			Logger: pebbleQuiet{}})
		if err != nil {
			t.Fatalf("open %s's store: %v", n.ID, err)
		}
		states := map[raftstore.ShardID]*log.Shard{}
		for _, id := range slots.Shards() {
			if has, err := hasShardState(db, id); err != nil || !has {
				if err != nil {
					t.Fatalf("%s shard %d: %v", n.ID, id, err)
				}
				continue // no replica of this shard here (never placed, or moved away and deleted)
			}
			s, err := log.OpenShard(db, id)
			if err != nil {
				db.Close()
				t.Fatalf("%s shard %d: %v", n.ID, id, err)
			}
			r, err := readReplica(db, s)
			if err != nil {
				db.Close()
				t.Fatalf("%s shard %d: %v", n.ID, id, err)
			}
			if r.applied == 0 {
				continue // no replica of this shard here (never placed, or moved away)
			}
			states[id] = s
			if replicas[id] == nil {
				replicas[id] = map[string]shardReplica{}
			}
			replicas[id][n.ID] = r
			if r.deadLetters != 0 {
				t.Errorf("%s shard %d holds %d dead letters (G5)", n.ID, id, r.deadLetters)
			}
		}
		for _, d := range w.devs {
			for i := range max(w.split[d.user], 1) {
				id := log.SubLog(d.user, i)
				shard, moved := w.moved[id]
				if !moved {
					shard = slots.UserShard(id)
				}
				if s := states[shard]; s != nil {
					userEntries += w.checkUserLog(n.ID, s, d, uint32(i))
				}
			}
		}
		for _, cv := range w.convs {
			shard, moved := w.movedConvs[cv.id]
			if !moved {
				shard = slots.ConvShard(cv.id)
			}
			if s := states[shard]; s != nil {
				convEntries += w.checkConvLog(n.ID, s, cv)
			}
		}
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}
	var summary []string
	for _, id := range slots.Shards() {
		var ref shardReplica
		var refNode string
		for _, n := range w.c.nodes {
			r, ok := replicas[id][n.ID]
			if !ok {
				continue
			}
			if refNode == "" {
				ref, refNode = r, n.ID
				continue
			}
			switch {
			case r.applied == ref.applied && (r.sum != ref.sum || r.keys != ref.keys):
				t.Errorf("shard %d: %s and %s applied index %d but their state differs: checksum %x (%d keys) vs %x (%d keys) (G2)",
					id, refNode, n.ID, r.applied, ref.sum, ref.keys, r.sum, r.keys)
			case r.applied != ref.applied && r.sumWithoutApplied != ref.sumWithoutApplied:
				t.Errorf("shard %d: %s applied %d, %s applied %d, and their states differ beyond that (G2)",
					id, refNode, ref.applied, n.ID, r.applied)
			case r.applied != ref.applied:
				w.tl.add("shard %d: %s applied %d, %s %d (entries without effect on the state); states otherwise identical",
					id, refNode, ref.applied, n.ID, r.applied)
			}
		}
		if len(replicas[id]) < 2 {
			t.Errorf("shard %d: replicas found on %d nodes, want at least 2 (G1)", id, len(replicas[id]))
		}
		summary = append(summary, fmt.Sprintf("shard %d: applied %d, %d keys, checksum %x, outbox %d..%d",
			id, ref.applied, ref.keys, ref.sum, ref.outbox.First, ref.outbox.Head))
	}
	w.tl.add("stores checked on %d nodes: %d user-log and %d conversation-log entries; %s",
		len(w.c.nodes), userEntries, convEntries, strings.Join(summary, "; "))
}

// pebbleQuiet discards Pebble's informational logs while the checker reads a store.
type pebbleQuiet struct{}

// Infof drops an informational message.
func (pebbleQuiet) Infof(string, ...any) {}

// Errorf reports an error through the default slog logger.
func (pebbleQuiet) Errorf(f string, args ...any) {
	slog.Error(fmt.Sprintf(f, args...), "component", "pebble")
}

// Fatalf panics: the checker cannot go on without the store.
func (pebbleQuiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// readReplica reads a shard's applied index, state checksums, dead-letter count and outbox.
func readReplica(db *pebble.DB, s *log.Shard) (shardReplica, error) {
	var r shardReplica
	var err error
	if r.applied, err = s.Applied(); err != nil {
		return r, err
	}
	if r.sum, r.keys, err = s.StateChecksum(); err != nil {
		return r, err
	}
	if r.sumWithoutApplied, err = checksumWithoutApplied(db, s.ID()); err != nil {
		return r, err
	}
	if r.deadLetters, err = s.DeadLetterCount(); err != nil {
		return r, err
	}
	r.outbox, err = s.Outbox()
	return r, err
}

// checksumWithoutApplied chains every key and value of the shard's state except the metadata
// key holding the applied index (0x01 | shard u32 | 0x01 | "applied", see log/keys.go), so two
// replicas that applied different numbers of entries without effect on the state (Raft
// configuration entries) still compare equal.
func checksumWithoutApplied(db *pebble.DB, shard raftstore.ShardID) (uint64, error) {
	lower := binary.BigEndian.AppendUint32([]byte{0x01}, uint32(shard))
	upper := binary.BigEndian.AppendUint32([]byte{0x01}, uint32(shard)+1)
	applied := append(slices.Clone(lower), append([]byte{0x01}, "applied"...)...)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	table := crc64.MakeTable(crc64.ECMA)
	var sum uint64
	for ok := it.First(); ok; ok = it.Next() {
		if bytes.Equal(it.Key(), applied) {
			continue
		}
		sum = crc64.Update(sum, table, binary.BigEndian.AppendUint64(nil, uint64(len(it.Key()))))
		sum = crc64.Update(sum, table, it.Key())
		sum = crc64.Update(sum, table, binary.BigEndian.AppendUint64(nil, uint64(len(it.Value()))))
		sum = crc64.Update(sum, table, it.Value())
	}
	return sum, it.Error()
}

// readWhole pages a log from position 1 to its head, checking that it starts at 1 and every page
// continues the previous one (G2, G3).
func readWhole(read func(from log.Position) (log.Read, error)) ([]log.Entry, error) {
	var out []log.Entry
	from := log.Position(1)
	for {
		r, err := read(from)
		if err != nil {
			return out, fmt.Errorf("read from %d: %w", from, err)
		}
		switch r.Status {
		case log.ReadCaughtUp:
			if r.Info.Head != from-1 || r.Info.First > 1 {
				return out, fmt.Errorf("caught up at %d, but the log's info is %+v", from, r.Info)
			}
			return out, nil
		case log.ReadEntries:
			if len(r.Entries) == 0 {
				return out, fmt.Errorf("read from %d: no entries", from)
			}
			for _, e := range r.Entries {
				if e.Seq != from {
					return out, fmt.Errorf("position %d where %d was expected", e.Seq, from)
				}
				out = append(out, e)
				from++
			}
		default:
			return out, fmt.Errorf("read from %d: status %v, info %+v", from, r.Status, r.Info)
		}
	}
}

// checkUserLog checks node's replica of device d's user log (its sub-log sub, for a split user):
// contiguous from 1 and holding exactly the entries of it the device stored, in the same order,
// then at most delivery reports (kind delivered): those of the devices' last acks, which the
// server's report rounds may write after the devices converged and were closed. It returns the
// log's length.
func (w *workload) checkUserLog(node string, s *log.Shard, d *wlDevice, sub uint32) int {
	t := w.t
	t.Helper()
	id := log.SubLog(d.user, int(sub))
	got, err := readWhole(func(from log.Position) (log.Read, error) { return s.ReadUser(id, 0, from, log.Limit{}) })
	if err != nil {
		t.Errorf("%s: %s's log on shard %d: %v (G2)", node, id, s.ID(), err)
		return len(got)
	}
	var stored []proto.Entry // the device's entries of this sub-log
	for i, e := range d.entries {
		if d.subs[i] == sub {
			stored = append(stored, e)
		}
	}
	late := 0 // delivered entries after the last one the device stored
	for late < len(got)-len(stored) && got[len(got)-1-late].Kind == log.KindDelivered {
		late++
	}
	if len(got)-late != len(stored) {
		t.Errorf("%s: %s's log holds %d entries (and %d delivery reports after them), the device stored %d",
			node, id, len(got)-late, late, len(stored))
	}
	for i := range min(len(got), len(stored)) {
		e, de := got[i], stored[i]
		if e.MsgID.String() != string(de.MsgID) || e.Conv != de.Conv || proto.Position(e.ConvSeq) != de.ConvSeq ||
			!bytes.Equal(e.Body, de.Body) || e.Sender != de.Sender {
			t.Errorf("%s: %s's log at %d holds %s %s/%d %q, the device stored %s %s/%d %q", node, id, e.Seq,
				e.MsgID, e.Conv, e.ConvSeq, e.Body, de.MsgID, de.Conv, de.ConvSeq, de.Body)
			break
		}
	}
	return len(got)
}

// checkConvLog checks node's replica of a conversation log: contiguous from 1, its messages
// exactly the ones every member device stored (same conv_seq, msg_id, body; checkDevices kept
// them), every acked message at its ack. It returns the log's length.
func (w *workload) checkConvLog(node string, s *log.Shard, cv *wlConv) int {
	t := w.t
	t.Helper()
	got, err := readWhole(func(from log.Position) (log.Read, error) { return s.ReadConv(cv.id, 0, from, log.Limit{}) })
	if err != nil {
		t.Errorf("%s: log of %s on shard %d: %v (G2)", node, cv.id, s.ID(), err)
		return len(got)
	}
	var logView convView
	for _, e := range got {
		if e.Kind == log.KindMessage {
			logView = append(logView, fmt.Sprintf("%d %s %s", e.ConvSeq, e.MsgID, e.Body))
		}
		if u, ok := w.skipped[cv.id][proto.Position(e.ConvSeq)]; ok && e.Kind != log.KindDelivered {
			t.Errorf("%s: %s's device jumped over %s/%d, which holds an entry of kind %d for every member (G5)",
				node, u, cv.id, e.ConvSeq, e.Kind)
		}
	}
	for p, u := range w.skipped[cv.id] {
		if p > proto.Position(len(got)) {
			t.Errorf("%s: %s's device jumped over %s/%d, beyond the log's %d entries", node, u, cv.id, p, len(got))
		}
	}
	if missing := w.missingAcks(cv.id, logView); len(missing) > 0 {
		t.Errorf("%s: log of %s lacks %d acked messages (G1), first %s", node, cv.id, len(missing), missing[0])
	}
	devView := w.final[cv.id]
	if !slices.Equal(logView, devView) {
		t.Errorf("%s: log of %s holds %d messages, %s's device stored %d; first difference at %d",
			node, cv.id, len(logView), cv.members[0], len(devView), firstDiff(logView, devView))
	}
	return len(got)
}

// firstDiff returns the first index where a and b differ.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// hasShardState reports whether db holds any state key of shard id (prefix 0x01 | id, see
// log/keys.go): a node the shard was never placed on, or that dropped its copy, holds none.
func hasShardState(db *pebble.DB, id raftstore.ShardID) (bool, error) {
	lower := binary.BigEndian.AppendUint32([]byte{0x01}, uint32(id))
	upper := binary.BigEndian.AppendUint32([]byte{0x01}, uint32(id)+1)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return false, err
	}
	defer it.Close()
	return it.First(), it.Error()
}
