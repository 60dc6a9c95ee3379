package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	quicgo "github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/conformance"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The conformance kit (syncd/conformance, docs/CONFORMANCE.md) run the way a driver in any
// language runs it: through its control API over HTTP and its relay over QUIC. The Go SDK must
// pass every scenario; a deliberately broken client must fail the scenarios it breaks.

// startKit starts a kit on free loopback ports, closed when the test ends.
func startKit(t *testing.T) *conformance.Kit {
	t.Helper()
	k, err := conformance.Start(conformance.Config{Listen: testkit.FreeAddr(t), Control: testkit.FreeAddr(t), Web: testkit.FreeAddr(t),
		Logger: syncdtest.Logger(t), Out: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Errorf("kit close: %v", err)
		}
	})
	return k
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// postJSON posts in (nil: no body) to url and decodes the answer into out.
func postJSON(t *testing.T, url string, in, out any) {
	t.Helper()
	var body io.Reader = http.NoBody
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	res, err := http.Post(url, "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s: %s", url, res.Status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("POST %s: %v: %s", url, err, b)
	}
}

// startRun starts a run of scenario on the kit.
func startRun(t *testing.T, k *conformance.Kit, scenario string) conformance.RunInfo {
	var info conformance.RunInfo
	postJSON(t, k.ControlURL()+"/v1/runs", map[string]string{"scenario": scenario}, &info)
	return info
}

// reportUntilJudged posts the client's view every 200 ms until the kit's verdict is final.
func reportUntilJudged(t *testing.T, info conformance.RunInfo, view func() conformance.Report) conformance.Verdict {
	t.Helper()
	deadline := time.Now().Add(time.Duration(info.TimeoutMs)*time.Millisecond + 10*time.Second)
	for {
		var v conformance.Verdict
		postJSON(t, info.ReportURL, view(), &v)
		if v.Status != conformance.Pending {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still pending after its timeout: %v", info.Run, v.Reasons)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// driveGoSDK plays a run with the Go SDK: a fresh device store, the run's sends, and reports of
// what the SDK stored until the kit has judged.
func driveGoSDK(t *testing.T, info conformance.RunInfo) conformance.Verdict {
	c, err := client.Open(client.Config{Addr: info.Addr, Fingerprint: info.Fingerprint, Device: info.Device, Token: info.Token,
		TokenSource: func(ctx context.Context) (string, error) {
			var tok struct{ Token string }
			postJSON(t, info.TokenURL, nil, &tok)
			return tok.Token, nil
		},
		StoreDir: t.TempDir(), Logger: syncdtest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var epochEvents atomic.Int32
	go func() { // nothing waits on events here: drain them, counting EpochEvents
		for ev := range c.Events() {
			if _, ok := ev.(client.EpochEvent); ok {
				epochEvents.Add(1)
			}
		}
	}()
	for _, s := range info.Sends {
		if _, err := c.Send(s.Conv, s.Peer, []byte(s.Body)); err != nil {
			t.Fatal(err)
		}
	}
	v := reportUntilJudged(t, info, func() conformance.Report {
		msgs, err := c.Messages(info.Conv)
		if err != nil {
			t.Fatal(err)
		}
		conv := conformance.ReportConv{Conv: info.Conv}
		for _, m := range msgs {
			conv.Messages = append(conv.Messages, conformance.ReportMessage{MsgID: string(m.MsgID), ConvSeq: uint64(m.ConvSeq)})
		}
		return conformance.Report{Conversations: []conformance.ReportConv{conv}}
	})
	// What the SDK promises beyond the kit's verdict, which also passes a client that resyncs:
	// after a restore that holds its cursor it continues without an EpochEvent (§8.4), and after
	// one behind its cursor it resyncs and says so.
	switch n := epochEvents.Load(); {
	case info.Scenario == "restore" && n > 0:
		t.Errorf("the Go SDK emitted %d EpochEvents after a restore that holds its cursor: it resynced instead of continuing", n)
	case info.Scenario == "restore_behind" && n == 0:
		t.Errorf("the Go SDK emitted no EpochEvent after a restore behind its cursor")
	}
	return v
}

func TestConformanceGoSDK(t *testing.T) {
	k := startKit(t)
	for _, sc := range conformance.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			v := driveGoSDK(t, startRun(t, k, sc.Name))
			if v.Status != conformance.Passed {
				t.Errorf("the Go SDK fails %s (%s): %s", sc.Name, v.Section, strings.Join(v.Reasons, "; "))
			}
		})
	}
}

// naiveClient is a broken client: it stores every entry it is sent, in the order sent, and
// acknowledges the last — no contiguity check, no dedup by msg_id.
type naiveClient struct {
	mu      chan struct{}
	entries []proto.Entry
}

// driveNaive plays a run with the naive client. With digests it also checks its log with Digest
// once caught up, as §8.7 asks, but digests every entry by its body — a folded entry's body_hash
// ignored — and reports the mismatch it then finds.
func driveNaive(t *testing.T, info conformance.RunInfo, digests bool) conformance.Verdict {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn, err := quicgo.DialAddr(ctx, info.Addr, proto.PinnedTLSConfig(info.Fingerprint), &quicgo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	ctl, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteFrame(ctl, &proto.Hello{Token: info.Token, Device: info.Device, ProtoVersion: proto.ProtoVersion}); err != nil {
		t.Fatal(err)
	}
	if f, err := proto.NewReader(ctl, 0).Next(); err != nil {
		t.Fatal(err)
	} else if _, ok := f.(*proto.Welcome); !ok {
		t.Fatalf("hello answered with %#v", f)
	}
	st, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.WriteFrame(st, &proto.SyncStart{Subs: []proto.SubCursor{{}}}); err != nil {
		t.Fatal(err)
	}
	nc := &naiveClient{mu: make(chan struct{}, 1)}
	go func() {
		rd := proto.NewReader(st, proto.MaxFrameLimit)
		for {
			f, err := rd.Next()
			if err != nil {
				return
			}
			if b, ok := f.(*proto.Batch); ok {
				nc.mu <- struct{}{}
				nc.entries = append(nc.entries, b.Entries...)
				<-nc.mu
				last := b.Entries[len(b.Entries)-1].Seq
				proto.WriteFrame(st, &proto.CursorAck{Epoch: b.Epoch, Pos: last, Source: b.Source})
			}
			if h, ok := f.(*proto.Heartbeat); ok && digests && h.Head > 0 {
				digests = false // once
				nc.mu <- struct{}{}
				stored := slices.Clone(nc.entries)
				<-nc.mu
				naiveDigestCheck(ctx, t, conn, ctl, h.Epoch, stored)
			}
		}
	}()
	return reportUntilJudged(t, info, func() conformance.Report {
		nc.mu <- struct{}{}
		defer func() { <-nc.mu }()
		conv := conformance.ReportConv{Conv: info.Conv}
		for _, e := range nc.entries {
			if e.Kind == proto.KindMessage {
				conv.Messages = append(conv.Messages, conformance.ReportMessage{MsgID: string(e.MsgID), ConvSeq: uint64(e.ConvSeq)})
			}
		}
		return conformance.Report{Conversations: []conformance.ReportConv{conv}}
	})
}

// naiveDigestCheck asks the server for the digest of stored (the user log from 1) and reports a
// mismatch with its own, computed by body even for folded entries.
func naiveDigestCheck(ctx context.Context, t *testing.T, conn *quicgo.Conn, ctl *quicgo.Stream, epoch proto.Epoch, stored []proto.Entry) {
	req, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return
	}
	defer req.Close()
	to := proto.Position(len(stored))
	if err := proto.WriteFrame(req, &proto.Digest{ID: 1, Epoch: epoch, From: 1, To: to}); err != nil {
		return
	}
	f, err := proto.NewReader(req, proto.MaxFrameLimit).Next()
	res, ok := f.(*proto.DigestResult)
	if err != nil || !ok {
		return
	}
	var d proto.Digester
	for _, e := range stored[:min(int(res.To), len(stored))] {
		e.Folded, e.BodyHash = 0, nil // the broken part
		d.Add(&e)
	}
	if !bytes.Equal(d.Sum(), res.Digest) {
		proto.WriteFrame(ctl, &proto.Report{Kind: proto.ReportMismatch, Epoch: epoch, From: res.From, To: res.To})
	}
}

// TestConformanceCatchesABrokenClient: a client that stores whatever it is sent fails exactly the
// scenarios that send it something it must not store, each for the reason that shows it.
func TestConformanceCatchesABrokenClient(t *testing.T) {
	k := startKit(t)
	for _, c := range []struct{ scenario, reason string }{
		{"gap", "as stored, but the stream had delivered a contiguous log only up to 0"},
		{"reorder", "as stored, but the stream had delivered a contiguous log only up to 0"},
		{"source_gap", "of source .* as stored, but the stream had delivered a contiguous log of it only up to 1"},
		// stored twice, or acknowledged past the repeated batch (which broke the stream's contiguity)
		{"duplicate", "(is stored twice|as stored, but the stream had delivered a contiguous log only up to)"},
		// a client that takes a source's after at its word
		{"source_after", "of source .* as stored, but the stream had delivered a contiguous log of it only up to 1"},
		// a client that digests a folded entry by its (absent) body
		{"folded", "the client reported mismatch over 1-"},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			v := driveNaive(t, startRun(t, k, c.scenario), c.scenario == "folded")
			if v.Status != conformance.Failed || !regexp.MustCompile(c.reason).MatchString(fmt.Sprint(v.Reasons)) {
				t.Errorf("the broken client got %s on %s (%v), want failed because %q", v.Status, c.scenario, v.Reasons, c.reason)
			}
		})
	}
}

// epochPolicy is what the resumer (driveResumer) does with EpochChanged: by the spec, or wrongly.
type epochPolicy int

const (
	// byTheSpec continues when told to and resyncs the new epoch from 0 otherwise (§8.4).
	byTheSpec epochPolicy = iota
	// continueAlways keeps its cursor's position under the new epoch whether or not the server
	// says continues: it skips the new messages that take the positions a restore lost.
	continueAlways
	// dropOnContinue forgets its stored messages on every EpochChanged, continues or not.
	dropOnContinue
)

// driveResumer plays a run with a client written from PROTOCOL.md alone: it stores contiguous
// batches (each message once by msg_id, a new message replacing a stored one of its conv_seq),
// acks them, reconnects from its stored cursor when the connection ends, and handles
// EpochChanged by policy.
func driveResumer(t *testing.T, info conformance.RunInfo, policy epochPolicy) conformance.Verdict {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var stored []proto.Entry
	var epoch proto.Epoch
	var pos proto.Position
	done := make(chan struct{})
	go func() {
		defer close(done)
		token := info.Token
		for ctx.Err() == nil {
			conn, err := quicgo.DialAddr(ctx, info.Addr, proto.PinnedTLSConfig(info.Fingerprint), &quicgo.Config{})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			resume := func() error {
				ctl, err := conn.OpenStreamSync(ctx)
				if err != nil {
					return err
				}
				if err := proto.WriteFrame(ctl, &proto.Hello{Token: token, Device: info.Device, ProtoVersion: proto.ProtoVersion}); err != nil {
					return err
				}
				if f, err := proto.NewReader(ctl, 0).Next(); err != nil {
					return err
				} else if _, ok := f.(*proto.Welcome); !ok {
					return fmt.Errorf("hello answered with %#v", f)
				}
				for ctx.Err() == nil {
					st, err := conn.OpenStreamSync(ctx)
					if err != nil {
						return err
					}
					mu.Lock()
					from := proto.SubCursor{Epoch: epoch, Pos: pos}
					mu.Unlock()
					if err := proto.WriteFrame(st, &proto.SyncStart{Epoch: from.Epoch, Pos: from.Pos, Subs: []proto.SubCursor{from}}); err != nil {
						return err
					}
					rd := proto.NewReader(st, proto.MaxFrameLimit)
				stream:
					for {
						f, err := rd.Next()
						if err != nil {
							return err
						}
						mu.Lock()
						switch f := f.(type) {
						case *proto.Batch:
							if f.Epoch == epoch && f.Follows(pos) || epoch == 0 && pos == 0 {
								for _, e := range f.Entries {
									stored = storeOnce(stored, e)
								}
								epoch, pos = f.Epoch, f.Entries[len(f.Entries)-1].Seq
								proto.WriteFrame(st, &proto.CursorAck{Epoch: epoch, Pos: pos})
							}
						case *proto.EpochChanged:
							switch {
							case policy == dropOnContinue:
								stored = nil
							case policy == byTheSpec && !f.Continues:
								pos = 0
							}
							epoch = f.Epoch // continueAlways keeps its position: the broken part
							mu.Unlock()
							st.CancelRead(0)
							st.Close()
							break stream
						}
						mu.Unlock()
					}
				}
				return ctx.Err()
			}
			resume()
			conn.CloseWithError(0, "")
			if ctx.Err() != nil {
				return // the run is judged: no token to ask for
			}
			var tok struct{ Token string }
			postJSON(t, info.TokenURL, nil, &tok)
			token = tok.Token
			time.Sleep(200 * time.Millisecond)
		}
	}()
	defer func() {
		cancel()
		<-done
	}()
	return reportUntilJudged(t, info, func() conformance.Report {
		mu.Lock()
		defer mu.Unlock()
		conv := conformance.ReportConv{Conv: info.Conv}
		for _, e := range stored {
			if e.Kind == proto.KindMessage {
				conv.Messages = append(conv.Messages, conformance.ReportMessage{MsgID: string(e.MsgID), ConvSeq: uint64(e.ConvSeq)})
			}
		}
		return conformance.Report{Conversations: []conformance.ReportConv{conv}}
	})
}

// TestConformanceCatchesBrokenRestores: a client that keeps its position under every new epoch
// skips what took the lost positions after a restore behind its cursor, and one that forgets its
// messages when told to continue loses them; each run fails, saying what is missing.
func TestConformanceCatchesBrokenRestores(t *testing.T) {
	k, err := conformance.Start(conformance.Config{Listen: testkit.FreeAddr(t), Control: testkit.FreeAddr(t), Web: "off",
		RunTimeout: 15 * time.Second, Logger: syncdtest.Logger(t), Out: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	for _, c := range []struct {
		scenario string
		policy   epochPolicy
		reason   string
	}{
		{"restore_behind", continueAlways, `was lost with the restore and is still stored.*2 of 10 messages .* not stored yet \(conv_seq 7, 8\)|2 of 10 messages .* not stored yet \(conv_seq 7, 8\).*was lost with the restore`},
		{"restore", dropOnContinue, `6 of 10 messages .* not stored yet \(conv_seq 1, 2, 3, 4, 5, 6\)`},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			v := driveResumer(t, startRun(t, k, c.scenario), c.policy)
			if v.Status != conformance.Failed || !regexp.MustCompile(c.reason).MatchString(fmt.Sprint(v.Reasons)) {
				t.Errorf("the broken client got %s on %s (%v), want failed because %q", v.Status, c.scenario, v.Reasons, c.reason)
			}
		})
	}
	// The same client with EpochChanged handled by the spec passes both: the failures above are
	// its mistakes, not the kit's.
	for _, sc := range []string{"restore", "restore_behind"} {
		t.Run(sc+"/by_the_spec", func(t *testing.T) {
			if v := driveResumer(t, startRun(t, k, sc), byTheSpec); v.Status != conformance.Passed {
				t.Errorf("a client by the spec got %s on %s: %v", v.Status, sc, v.Reasons)
			}
		})
	}
}

// storeOnce adds e to stored: once by msg_id, and in place of a stored message of another msg_id
// at its conv_seq, which a restore lost (§8.4 EpochChanged).
func storeOnce(stored []proto.Entry, e proto.Entry) []proto.Entry {
	for i, s := range stored {
		switch {
		case s.MsgID == e.MsgID:
			return stored
		case e.Kind == proto.KindMessage && s.Kind == proto.KindMessage && s.Conv == e.Conv && s.ConvSeq == e.ConvSeq:
			stored[i] = e
			return stored
		}
	}
	return append(stored, e)
}
