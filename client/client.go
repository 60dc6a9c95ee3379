package client

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/syncd-dev/syncd/client/internal/store"
	"github.com/syncd-dev/syncd/proto"
)

// Config configures a Client. Zero fields take the documented defaults.
type Config struct {
	// Addr is the server's QUIC address (host:port). Required.
	Addr string
	// Addrs are more nodes of the same cluster (host:port), tried in turn when the current node
	// cannot be reached or cannot serve the device (StaleFailover; sends refused as unavailable
	// twice in a row): any node serves any device. They must present a certificate that
	// Fingerprint or TLS accepts (one certificate for the cluster, or a CA). Default none.
	Addrs []string
	// Token is the device's signed token; Device must be the device it names. Required unless
	// TokenSource is set.
	Token  string
	Device string
	// TokenSource, if set, returns a fresh token for Device from the app's authentication
	// service. The SDK calls it ahead of the expiry the server announces (Welcome and Refreshed
	// carry it: when a quarter of the remaining validity is left, at most 5 minutes before) and
	// presents the new token with Refresh, so a session outlives its token without
	// reconnecting; it also calls it for the first connection when Token is empty, and before
	// redialing when the token in hand has expired or was refused. Calls come one at a time from
	// the SDK's goroutines, bounded by ctx (RequestTimeout). Default none: the server closes the
	// connection when Token expires (token_expired), and the SDK keeps redialing with it,
	// reporting SyncFailedEvent.
	TokenSource func(ctx context.Context) (string, error)
	// Fingerprint pins the server certificate (SHA-256, hex, as syncd logs it). Leave empty
	// and set TLS for a certificate verified by a CA.
	Fingerprint string
	// TLS, if set, replaces the default TLS configuration (its NextProtos is overridden).
	TLS *tls.Config
	// StoreDir is the directory of the device's local store (outbox, entries, cursor).
	// Required.
	StoreDir string
	// Retry is the wait before each retry of a queued mutation; each wait gets +0–50% jitter.
	// After the last one the mutation is Failed. Default 1s, 3s, 7s, 15s, 30s.
	Retry []time.Duration
	// RequestTimeout bounds one attempt. Default 10s.
	RequestTimeout time.Duration
	// HeadCheck is how often the SDK asks the server for the head of the user's log to catch a
	// stalled sync stream; at least twice per request_idle_ms the server announced, which keeps
	// the request stream from being closed as idle. Default 2m.
	HeadCheck time.Duration
	// KeepAlive is the QUIC keep-alive period. Default 10s.
	KeepAlive time.Duration
	// StaleFailover is how long the SDK stays on a node that says it cannot prove the head of the
	// user's log (StaleEvent) before it reconnects through the next node of Addrs; with no other
	// node it stays (the node resumes by itself once it hears from the cluster again). Default
	// 5s; negative: never move for that.
	StaleFailover time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// addrs returns Addr followed by Addrs.
func (cfg *Config) addrs() []string { return append([]string{cfg.Addr}, cfg.Addrs...) }

func (cfg *Config) setDefaults() error {
	if cfg.Addr == "" || (cfg.Token == "" && cfg.TokenSource == nil) || cfg.Device == "" || cfg.StoreDir == "" {
		return errors.New("client: Config needs Addr, Token (or TokenSource), Device and StoreDir")
	}
	if cfg.Retry == nil {
		cfg.Retry = []time.Duration{time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second, 30 * time.Second}
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	if cfg.HeadCheck == 0 {
		cfg.HeadCheck = 2 * time.Minute
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 10 * time.Second
	}
	if cfg.StaleFailover == 0 {
		cfg.StaleFailover = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return nil
}

// Client is a device's connection to syncd: it keeps a durable outbox that it sends in order with
// bounded retries, and a sync loop that stores the user's log locally, gap-free, and acks the
// cursor. It reconnects by itself with jittered backoff. Safe for concurrent use.
type Client struct {
	cfg    Config
	st     *store.Store
	events chan Event
	kick   chan struct{} // the outbox has new work
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	user   string                       // from the first Welcome
	limits atomic.Pointer[proto.Limits] // of the latest connection, defaults filled in
	pace   pacer                        // the outbox's send rate (sendOutbox only)
	tokens tokens                       // the token in hand (token.go)

	curMu sync.Mutex
	cur   *conn // the live connection, nil while reconnecting

	closeOnce sync.Once
	closeErr  error
}

// Dial opens the local store, connects and authenticates, and starts the background work. A
// refused token fails Dial; after that, network trouble only delays (the SDK reconnects), and
// mutations queued meanwhile are sent when the connection is back — including those left in
// the outbox by an earlier run of the app.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	st, err := store.Open(cfg.StoreDir, cfg.Logger)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, st: st, events: make(chan Event, 1024), kick: make(chan struct{}, 1)}
	c.tokens.cur = cfg.Token
	var first *conn
	for _, addr := range cfg.addrs() { // the first node that answers; a definitive refusal is final
		var pe *proto.Error
		if first, err = c.dial(ctx, addr); err == nil || ctx.Err() != nil || (errors.As(err, &pe) && !pe.Code.Retryable()) {
			break
		}
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	c.user = first.welcome.User
	c.limits.Store(&first.limits)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.run(first)
	}()
	return c, nil
}

// User returns the authenticated user.
func (c *Client) User() string { return c.user }

// Events delivers what happened, in order, and is closed by Close. The app must keep reading
// it: when the buffer is full the SDK waits (it never drops an event). Besides entries and
// outbox statuses it says whether syncing works: SyncedEvent when the device is caught up,
// SyncFailedEvent when syncing keeps failing.
func (c *Client) Events() <-chan Event { return c.events }

// Close stops the background work, closes the Events channel and the local store. Queued
// mutations stay queued for the next Dial. Events emitted before Close stay readable until the
// closed channel is drained.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		close(c.events)
		c.closeErr = c.st.Close()
	})
	return c.closeErr
}

// Send queues a message to conv and returns its client_msg_id at once; the message is stored
// (status Sending) before Send returns, so it survives an app kill. peer names the other user
// when conv is a direct conversation that may not exist yet. A body larger than the server's
// max_body (as its latest Welcome announced) is refused at once with an *proto.Error of code
// proto.CodeTooLarge, and not queued.
func (c *Client) Send(conv, peer string, body []byte) (string, error) {
	if maxBody := int(c.limits.Load().MaxBody); len(body) > maxBody {
		return "", proto.Errorf(proto.CodeTooLarge, "body of %d bytes, the server accepts at most %d (max_body)", len(body), maxBody)
	}
	return c.queue(store.OutboxItem{Kind: proto.KindMessage, Conv: conv, Peer: peer, Body: body})
}

// MarkRead queues a read receipt: this user has read conv up to convSeq.
func (c *Client) MarkRead(conv string, convSeq proto.Position) (string, error) {
	return c.queue(store.OutboxItem{Kind: proto.KindReceipt, Conv: conv, UpTo: convSeq})
}

// Recall queues the recall of this user's message target in conv.
func (c *Client) Recall(conv string, target proto.MsgID) (string, error) {
	return c.queue(store.OutboxItem{Kind: proto.KindRecall, Conv: conv, Target: target})
}

// CreateGroup queues the creation of group conv with members (this user is always a member).
func (c *Client) CreateGroup(conv string, members []string) (string, error) {
	return c.queue(store.OutboxItem{Kind: proto.KindGroupCreate, Conv: conv, Members: members})
}

// AddMembers queues adding members to group conv.
func (c *Client) AddMembers(conv string, members []string) (string, error) {
	return c.queue(store.OutboxItem{Kind: proto.KindMemberAdd, Conv: conv, Members: members})
}

// RemoveMembers queues removing members from group conv (naming only this user: leaving it).
func (c *Client) RemoveMembers(conv string, members []string) (string, error) {
	return c.queue(store.OutboxItem{Kind: proto.KindMemberRemove, Conv: conv, Members: members})
}

// SetRole queues giving members role in group conv; only the group's owner may (the server
// refuses others with not_permitted). Giving proto.RoleOwner to one member hands the group over.
func (c *Client) SetRole(conv string, members []string, role proto.Role) (string, error) {
	return c.queue(store.OutboxItem{Kind: proto.KindRoleChange, Conv: conv, Members: members, Role: role})
}

func (c *Client) queue(it store.OutboxItem) (string, error) {
	it.Status = StatusSending
	it.Created = time.Now().UnixNano()
	it, err := c.st.AddOutbox(it)
	if err != nil {
		return "", err
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return it.ClientMsgID, nil
}

// Messages returns the conversation's messages stored on this device, in conversation order.
func (c *Client) Messages(conv string) ([]Message, error) { return c.st.Messages(conv) }

// emit delivers an event, waiting while the app catches up (until Close). An event that finds
// room in the buffer is never dropped, so an app that reads Events until the channel closes sees
// an event for every entry stored before Close.
func (c *Client) emit(e Event) {
	select {
	case c.events <- e: // room in the buffer: never dropped, also while Close runs
		return
	default:
	}
	select {
	case c.events <- e:
	case <-c.ctx.Done():
	}
}

// stableAfter is how long a connection must stay up for the reconnect backoff to start over. A
// connection that ends sooner counts as a failed attempt, like a failed dial, so a failure that
// persists past the handshake — a sync stream that keeps failing, a server that accepts and then
// drops the connection — backs off to 30 s instead of redialing at once, forever (issue #10: a
// batch beyond max_frame made the SDK redial 1,986 times in 10 s).
const stableAfter = 10 * time.Second

// reconnect is the reconnect schedule (PROTOCOL §8.6): after the n-th failed attempt in a row,
// wait min(30 s, 500 ms × 2^(n-1)), never less than the server's retry-after, plus 0–50% jitter.
// The zero value is ready: no failure yet.
type reconnect struct{ backoff time.Duration }

// failed records a failed attempt and returns the wait before the next one.
func (r *reconnect) failed(retryAfter time.Duration) time.Duration {
	r.backoff = min(max(2*r.backoff, 500*time.Millisecond), 30*time.Second)
	r.backoff = max(r.backoff, retryAfter)
	return r.backoff + rand.N(r.backoff/2+1)
}

// ended records the end of a connection that stayed up for up and returns the wait before
// redialing: after a stable connection the schedule starts over and the wait is only the
// server's retry-after, if any; after a shorter one it is a failed attempt.
func (r *reconnect) ended(up, retryAfter time.Duration) time.Duration {
	if up >= stableAfter {
		r.backoff = 0
		return retryAfter
	}
	return r.failed(retryAfter)
}

// retryAfterOf returns the retry-after an error from the server carries, or 0.
func retryAfterOf(err error) time.Duration {
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe.RetryAfter()
	}
	return 0
}

// run keeps a connection up: it serves the current one until it dies, then reconnects on the
// reconnect schedule (honoring a server's retry-after). It counts the attempts in a row that
// brought no sync progress and reports them with SyncFailedEvent from SyncFailureThreshold on.
func (c *Client) run(cn *conn) {
	var rc reconnect
	failures := 0
	addrs, next := c.cfg.addrs(), 0
	if cn != nil {
		next = slices.Index(addrs, cn.addr)
	}
	for c.ctx.Err() == nil {
		if cn == nil {
			ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
			var err error
			cn, err = c.dial(ctx, addrs[next])
			cancel()
			if err != nil {
				if c.ctx.Err() != nil {
					break
				}
				next = (next + 1) % len(addrs) // the next attempt tries another node
				wait := rc.failed(retryAfterOf(err))
				c.cfg.Logger.Debug("reconnect failed", "err", err, "backoff", wait)
				failures = c.syncFailed(failures, err)
				sleep(c.ctx, wait)
				continue
			}
			c.limits.Store(&cn.limits)
		}
		up := time.Now()
		progressed, err := c.serve(cn)
		cn.close()
		cn = nil
		if c.ctx.Err() != nil {
			break
		}
		if progressed {
			failures = 0
		} else {
			failures = c.syncFailed(failures, err)
		}
		if errors.Is(err, errMoveOn) {
			next = (next + 1) % len(addrs)
		}
		wait := rc.ended(time.Since(up), retryAfterOf(err))
		c.cfg.Logger.Debug("connection ended", "err", err, "up", time.Since(up), "sync_progressed", progressed, "backoff", wait)
		sleep(c.ctx, wait)
	}
	if cn != nil {
		cn.close()
	}
}

// syncFailed counts one more attempt without sync progress, reports it once the count reaches
// SyncFailureThreshold, and returns the count.
func (c *Client) syncFailed(failures int, err error) int {
	failures++
	if failures >= SyncFailureThreshold {
		c.emit(SyncFailedEvent{Err: err, Failures: failures})
	}
	return failures
}

// errConnEnded stands for a connection that ended without saying why.
var errConnEnded = errors.New("client: connection ended")

// errMoveOn ends a connection to a node that cannot serve the device right now although it
// answers — its sync stream has been stale for Config.StaleFailover, or it refused sends with
// unavailable twice in a row (it cannot reach the shard's leader) — when Config.Addrs names other
// nodes: run then reconnects through the next one.
var errMoveOn = errors.New("client: moving to another node")

// movesOn reports whether the SDK may move to another node: Config.Addrs names one.
func (c *Client) movesOn() bool { return len(c.cfg.Addrs) > 0 }

// serve runs the outbox and the sync loop on cn until either fails or the client closes. It
// reports whether the sync made progress on cn (syncLoop) and why the connection ended: a reason
// to move to another node (errMoveOn) from either, else the sync loop's error, else the
// connection's.
func (c *Client) serve(cn *conn) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	c.setConn(cn)
	defer c.setConn(nil)
	var wg sync.WaitGroup
	wg.Add(3)
	var sendErr error
	go func() {
		defer wg.Done()
		defer cancel()
		sendErr = c.sendOutbox(ctx, cn)
	}()
	go func() {
		defer wg.Done()
		c.keepToken(ctx, cn) // ends with ctx; a failed refresh only means the server closes at expiry
	}()
	go func() {
		defer wg.Done()
		defer cancel()
		progressed, err = c.syncLoop(ctx, cn)
	}()
	select {
	case <-ctx.Done():
	case <-cn.dead():
	}
	cancel()
	cn.close()
	wg.Wait()
	if errors.Is(sendErr, errMoveOn) && !errors.Is(err, errMoveOn) {
		err = sendErr
	}
	if err == nil || errors.Is(err, context.Canceled) { // stopped from outside: say why
		err = cmp.Or(cn.pend.Err(), errConnEnded)
	}
	var pe *proto.Error
	if err = closeError(err); !errors.As(err, &pe) {
		if closed := cn.closedWith.Load(); closed != nil {
			err = closed // the close says why, with its retry-after
		}
	}
	c.tokens.refusedIf(err)
	return progressed, err
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (c *Client) setConn(cn *conn) {
	c.curMu.Lock()
	c.cur = cn
	c.curMu.Unlock()
}

// ErrOffline is returned by queries while the client is reconnecting.
var ErrOffline = errors.New("client: not connected; retry when the connection is back")

// query sends one request on the live connection.
func (c *Client) query(ctx context.Context, build func(id uint64) proto.Frame) (proto.Frame, error) {
	c.curMu.Lock()
	cn := c.cur
	c.curMu.Unlock()
	if cn == nil {
		return nil, ErrOffline
	}
	f, err := cn.do(ctx, build)
	if e, ok := f.(*proto.Error); ok {
		return nil, e
	}
	return f, err
}

// Conversations returns, from the server, up to limit conversations of this user with ids after
// after (a page), and whether more follow. After a RebaseEvent this is how an app refreshes its
// conversation list.
func (c *Client) Conversations(ctx context.Context, after string, limit int) ([]proto.ConvInfo, bool, error) {
	f, err := c.query(ctx, func(id uint64) proto.Frame {
		return &proto.ConvList{ID: id, After: after, Limit: uint32(max(limit, 0))}
	})
	if err != nil {
		return nil, false, err
	}
	r, ok := f.(*proto.ConvListResult)
	if !ok {
		return nil, false, fmt.Errorf("client: unexpected answer %v", f.FrameType())
	}
	return r.Convs, r.More, nil
}

// History returns, from the server, up to limit entries of conv before conv_seq before (0 = the
// latest), ascending: "load earlier messages".
func (c *Client) History(ctx context.Context, conv string, before proto.Position, limit int) (*proto.HistoryResult, error) {
	f, err := c.query(ctx, func(id uint64) proto.Frame {
		return &proto.History{ID: id, Conv: conv, Before: before, Limit: uint32(max(limit, 0))}
	})
	if err != nil {
		return nil, err
	}
	r, ok := f.(*proto.HistoryResult)
	if !ok {
		return nil, fmt.Errorf("client: unexpected answer %v", f.FrameType())
	}
	return r, nil
}

// ReadMark returns how far user has read conv, as this device has stored it.
func (c *Client) ReadMark(conv, user string) (proto.Position, error) {
	return c.st.ReadMark(conv, user)
}

// Members returns the members of group conv as this device has stored them (direct
// conversations carry no membership entries: their members are the two users of the id). It
// returns ErrMembersIncomplete after a change to more than proto.MaxInlineMembers users, which
// reaches the log as a count only: FetchMembers then gets them from the server.
func (c *Client) Members(conv string) ([]string, error) { return c.st.Members(conv) }

// ErrMembersIncomplete: see Members.
var ErrMembersIncomplete = store.ErrMembersIncomplete

// FetchMembers pages conv's current members and their roles from the server, stores the list
// (Members then returns it) and returns it.
func (c *Client) FetchMembers(ctx context.Context, conv string) ([]proto.Member, error) {
	var all []proto.Member
	for after := ""; ; {
		f, err := c.query(ctx, func(id uint64) proto.Frame { return &proto.Members{ID: id, Conv: conv, After: after} })
		if err != nil {
			return nil, err
		}
		r, ok := f.(*proto.MembersResult)
		if !ok {
			return nil, fmt.Errorf("client: unexpected answer %v", f.FrameType())
		}
		all = append(all, r.Members...)
		if !r.More || len(r.Members) == 0 {
			break
		}
		after = r.Members[len(r.Members)-1].User
	}
	users := make([]string, len(all))
	for i, m := range all {
		users[i] = m.User
	}
	return all, c.st.SetMembers(conv, users)
}

// LocalConversations returns the ids of the conversations stored on this device.
func (c *Client) LocalConversations() ([]string, error) { return c.st.Conversations() }

// Queued is a mutation in the device's outbox, with its status.
type Queued struct {
	ClientMsgID string
	Kind        proto.Kind
	Conv        string
	Status      Status
	Attempts    int
	Ack         *proto.Ack // when Sent
	LastError   string     // the last failure, if any
}

func queued(it store.OutboxItem) Queued {
	return Queued{ClientMsgID: it.ClientMsgID, Kind: it.Kind, Conv: it.Conv, Status: it.Status,
		Attempts: it.Attempts, Ack: it.Ack, LastError: it.LastError}
}

// Outbox returns every mutation this device queued, oldest first, with its status: what an app
// shows as sending, sent or failed after a restart.
func (c *Client) Outbox() ([]Queued, error) {
	items, err := c.st.ListOutbox()
	out := make([]Queued, 0, len(items))
	for _, it := range items {
		out = append(out, queued(it))
	}
	return out, err
}

// Lookup returns the queued mutation with the given client_msg_id.
func (c *Client) Lookup(clientMsgID string) (Queued, bool, error) {
	it, ok, err := c.st.OutboxByCMID(clientMsgID)
	if err != nil || !ok {
		return Queued{}, ok, err
	}
	return queued(it), true, nil
}

// Status is the state of a queued mutation: StatusSending, StatusSent or StatusFailed. Its
// numbers are stored on disk by the local store, which owns the type.
type Status = store.Status

// Outbox statuses (PROTOCOL.md §8.3).
const (
	StatusSending = store.StatusSending // queued or in flight; resent after a restart
	StatusSent    = store.StatusSent    // acknowledged by the server (Ack stored)
	StatusFailed  = store.StatusFailed  // given up: a non-retryable error or retries exhausted
)

// Message is a message of a conversation as stored on the device, for display; Messages returns
// them. The local store, which builds them, owns the type.
type Message = store.Message
