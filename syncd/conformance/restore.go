package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// The restore scenarios lose a run's cluster and restore it from a backup, as an operator does
// (syncctl backup, syncd restore): the kit backs up its server through the admin API, cuts the
// run's client off, restores the backup into a server of the run's own, and relays the client
// there from then on. The kit's other runs go on on the kit's server, untouched.

// ownServer is a server the kit restored for one run.
type ownServer struct {
	srv    *syncd.Server
	done   chan error // what its Run returned
	stop   context.CancelFunc
	closed sync.Once
}

// close stops the server and waits for it.
func (o *ownServer) close() {
	o.closed.Do(func() {
		o.stop()
		<-o.done
	})
}

// loseAndRestore is the action of the restore scenarios: once the client has acknowledged its
// log's head, it backs up the kit's server and loses the run's cluster — in this order when the
// client must come back past the backup (lost messages, written and acknowledged in between), in
// the other when it must come back within it — then restores the backup into a server of the
// run's own, writes 4 messages there and relays the client to it.
func (k *Kit) loseAndRestore(r *run, lost int) error {
	head, err := k.userHead(r)
	if err != nil {
		return err
	}
	if !r.waitAcked(head) {
		return nil // the run fails for its time; nothing to restore
	}
	if lost == 0 {
		// Lost first: the server may still append to the client's log what the client's acks
		// caused (a delivery report, §8.8), and the backup must hold all the client can have
		// acknowledged.
		r.lose()
	}
	backup, kept, err := k.stableBackup(r)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.s.pos = kept
	r.mu.Unlock()
	if lost > 0 {
		if err := k.post(r, lost, 0); err != nil {
			return err
		}
		// The messages reach the user's log through the fan-out: wait for them there.
		head := kept
		for head < kept+proto.Position(lost) {
			if time.Now().After(r.deadline) {
				return fmt.Errorf("the %d messages written after the backup did not reach the client's log (head %d, backup %d)", lost, head, kept)
			}
			time.Sleep(20 * time.Millisecond)
			var err error
			if head, err = k.userHead(r); err != nil {
				return err
			}
		}
		if !r.waitAcked(head) {
			return nil
		}
		truth, err := k.history(r)
		if err != nil {
			return err
		}
		gone := map[string]proto.Position{}
		for i := len(truth) - 1; i >= 0 && len(gone) < lost; i-- {
			if e := truth[i]; e.Kind == proto.KindMessage {
				gone[string(e.MsgID)] = e.ConvSeq
			}
		}
		r.mu.Lock()
		r.s.lost = gone
		r.mu.Unlock()
		r.lose()
	}
	if err := k.restoreOwn(r, backup); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if err := k.post(r, 4, 0); err != nil {
		return err
	}
	r.reopen()
	return nil
}

// stableBackup backs up the kit's server until the head of the client's log is the same before
// and after, and returns the backup's directory and that head.
func (k *Kit) stableBackup(r *run) (string, proto.Position, error) {
	for attempt := 0; ; attempt++ {
		head, err := k.userHead(r)
		if err != nil {
			return "", 0, err
		}
		backup, err := k.backup(r)
		if err != nil {
			return "", 0, err
		}
		after, err := k.userHead(r)
		if err != nil {
			return "", 0, err
		}
		if after == head {
			return backup, head, nil
		}
		os.RemoveAll(filepath.Dir(backup)) // a backup that may not hold the whole log: not restored
		if attempt == 4 {
			return "", 0, fmt.Errorf("the client's log kept growing during %d backups (head %d, then %d)", attempt+1, head, after)
		}
	}
}

// userHead is the head of the run's user log.
func (k *Kit) userHead(r *run) (proto.Position, error) {
	p, err := r.reader()
	if err != nil {
		return 0, err
	}
	r.readerMu.Lock()
	defer r.readerMu.Unlock()
	h, err := p.head()
	if err != nil {
		return 0, err
	}
	return h.Head, nil
}

// backup backs up the kit's server into a new directory of the run's and returns it.
func (k *Kit) backup(r *run) (string, error) {
	dir, err := os.MkdirTemp(k.dir, "restore-"+r.id+"-")
	if err != nil {
		return "", err
	}
	backup := filepath.Join(dir, "backup")
	if _, err := adminapi.TakeBackup(k.ctx, k.admin(), backup, "syncd conformance kit", nil); err != nil {
		return "", fmt.Errorf("back up the kit's server: %w", err)
	}
	r.tracef("backed up the kit's server into %s", backup)
	return backup, nil
}

// waitAcked waits until the client has acknowledged position pos of its log, and reports whether
// it did before the run's time was up.
func (r *run) waitAcked(pos proto.Position) bool {
	for {
		r.mu.Lock()
		acked, deadline := r.acked, r.deadline
		r.mu.Unlock()
		if acked >= pos {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-r.k.ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// withoutLost returns rep without the messages the restore lost, which a correct client replaces
// with the new messages of their conv_seqs once it has resynced, and says which are still there.
// Called with r.mu held.
func (r *run) withoutLost(rep *Report) (*Report, []string) {
	if len(r.s.lost) == 0 {
		return rep, nil
	}
	var still []string
	out := &Report{}
	for _, c := range rep.Conversations {
		kept := ReportConv{Conv: c.Conv}
		for _, m := range c.Messages {
			if seq, ok := r.s.lost[m.MsgID]; ok && c.Conv == r.conv {
				still = append(still, fmt.Sprintf("message %s (conv_seq %d) was lost with the restore and is still stored: "+
					"the server gave its conv_seq to a new message, which replaces it (§8.4 EpochChanged)", m.MsgID, seq))
				continue
			}
			kept.Messages = append(kept.Messages, m)
		}
		out.Conversations = append(out.Conversations, kept)
	}
	return out, still
}

// lose cuts the run off from the kit's server: the relay closes the client's connections as a
// node shutting down does and refuses new ones until reopen, and the kit's own connections of the
// run are closed.
func (r *run) lose() {
	r.upMu.Lock()
	r.restoring = true
	r.upMu.Unlock()
	r.mu.Lock()
	conns := slices.Clone(r.conns)
	r.mu.Unlock()
	r.dropPeers()
	for _, c := range conns {
		c.closeWith(&proto.Error{Code: proto.CodeUnavailable, Message: "the node is shutting down (the conformance kit restores the run's cluster from a backup)"})
	}
	r.tracef("the run's cluster is lost: the client's connections are closed")
}

// restoreOwn restores the backup into a new server of the run's own (syncd.Restore, then a start
// on the restored directory with the kit's token secret). The relay still refuses the client
// until reopen: the scenario writes first what the client must find there.
func (k *Kit) restoreOwn(r *run, backup string) error {
	cfg := k.serverConfig(filepath.Join(filepath.Dir(backup), "server"))
	rep, err := syncd.Restore(cfg, backup)
	if err != nil {
		return err
	}
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return nil
	}
	ctx, stop := context.WithCancel(k.ctx)
	own := &ownServer{stop: stop}
	if own.srv, own.done, err = k.startServer(ctx, cfg); err != nil {
		stop()
		return err
	}
	r.upMu.Lock()
	r.own = own
	r.upMu.Unlock()
	r.dropPeers() // a report meanwhile may have dialed the kit's server again
	r.tracef("restored %d logs into the run's own server at %s", rep.Renewed, own.srv.Addr())
	return nil
}

// reopen relays the run's client again, to its own server.
func (r *run) reopen() {
	r.upMu.Lock()
	r.restoring = false
	r.upMu.Unlock()
}

// upstream is the server the relay connects the run's client to; nil while the run's cluster is
// lost (between lose and reopen) and once its own server has stopped.
func (r *run) upstream() *syncd.Server {
	r.upMu.Lock()
	defer r.upMu.Unlock()
	if r.restoring || r.retired {
		return nil
	}
	return r.serverLocked()
}

// server is the server the kit's own connections of the run use: the run's own once restored,
// else the kit's.
func (r *run) server() *syncd.Server {
	r.upMu.Lock()
	defer r.upMu.Unlock()
	return r.serverLocked()
}

// serverLocked is server, called with r.upMu held.
func (r *run) serverLocked() *syncd.Server {
	if r.own != nil {
		return r.own.srv
	}
	return r.k.srv
}

// retire stops the run's own server, if it has one, once its verdict is final.
func (r *run) retire() {
	r.upMu.Lock()
	own := r.own
	r.retired = own != nil
	r.upMu.Unlock()
	if own != nil {
		r.dropPeers()
		own.close()
	}
}

// admin is a client of the kit's server's admin API.
func (k *Kit) admin() *adminClient {
	return &adminClient{base: "http://" + k.srv.AdminAddr().String(), token: k.srv.AdminToken()}
}

// adminClient calls a server's admin API with its admin token (adminapi.BackupAPI).
type adminClient struct {
	base  string
	token string
}

func (a *adminClient) Base() string { return a.base }

func (a *adminClient) Call(ctx context.Context, method, path string, out any) error {
	resp, err := a.do(ctx, method, a.base, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

func (a *adminClient) Stream(ctx context.Context, base, path string) (*http.Response, error) {
	return a.do(ctx, http.MethodGet, base, path)
}

// do sends a body-less request and returns the response to a 2xx answer; another answer is an
// error wrapping its adminapi.OpsError.
func (a *adminClient) do(ctx context.Context, method, base, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return nil, err
	}
	adminapi.Authorize(req, a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		oe := &adminapi.OpsError{}
		if json.Unmarshal(b, oe) != nil || oe.Message == "" {
			oe.Message = strings.TrimSpace(string(b))
		}
		return nil, fmt.Errorf("%s %s: %s: %w", method, path, resp.Status, oe)
	}
	return resp, nil
}
