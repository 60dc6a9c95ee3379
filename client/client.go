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
	// Ceiling is how far behind the server's head the device's cursor may be for its sync stream
	// to replay the entries in between: further behind, the server answers Rebase and the SDK
	// loads each conversation's state and recent history instead (RebaseEvent), which costs a
	// few queries per conversation rather than one entry per missed event. Default 10,000;
	// negative: no ceiling, always replay.
	Ceiling int
	// RebaseHistory is how many of a conversation's latest entries a rebase loads into the local
	// store when the device's copy of it is behind (older ones: History, on demand). Default
	// 100; negative: none, only the conversations' state.
	RebaseHistory int
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
	if cfg.Ceiling == 0 {
		cfg.Ceiling = 10_000
	}
	if cfg.RebaseHistory == 0 {
		cfg.RebaseHistory = 100
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return nil
}

// Client is a device's connection to syncd: it keeps a durable outbox that it sends with bounded
// retries, each conversation's mutations in order, and a sync loop that stores the user's log
// locally, gap-free, and acks the cursor. It works from its local store while there is no
// connection, and connects and reconnects by itself with jittered backoff. Safe for concurrent
// use.
type Client struct {
	cfg      Config
	st       *store.Store
	events   chan Event
	kick     chan struct{} // the outbox has new work
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	sessions tls.ClientSessionCache // this Client's TLS sessions, for resumption (conn.go)

	user   atomic.Pointer[string]       // from the latest Welcome, or stored by an earlier run
	limits atomic.Pointer[proto.Limits] // the latest Welcome's (the protocol's before one), defaults filled in
	pace   pacer                        // the outbox's send rate (sendOutbox's loop only)
	qpace  pacer                        // the query rate of a rebase and the digest checks (the sync loop only)
	tokens tokens                       // the token in hand (token.go)
	checks checker                      // what the digest checks and gap reports remember (check.go; the sync loop only)

	curMu sync.Mutex
	cur   *conn // the live connection, nil while offline

	closeOnce sync.Once
	closeErr  error
}

// Open opens the device's local store and returns at once, without waiting for any connection:
// an app starts offline. Everything stored by earlier runs is readable (Messages,
// LocalConversations, Members, ReadMark, Outbox, Lookup, StatusOf, PeerMarks), and mutations queue in the durable
// outbox as always. In the background the client connects — trying Config.Addr and then
// Config.Addrs, with the reconnect backoff between attempts — and once a node answers it sends
// what is queued, including what earlier runs left in the outbox, and syncs. ConnectedEvent and
// OfflineEvent say when the connection comes and goes; until it is up, the online-only queries
// (History, Conversations, FetchMembers) return ErrOffline. A token the server refuses does not
// fail Open: it is reported with OfflineEvent and, as it persists, SyncFailedEvent (and retried,
// with a fresh one from Config.TokenSource if set).
//
// Open fails only on a bad Config or a local store that cannot be opened (for example one that
// another Client holds open).
func Open(cfg Config) (*Client, error) {
	c, err := open(cfg)
	if err != nil {
		return nil, err
	}
	c.start(nil)
	return c, nil
}

// Dial is Open for an app that needs the server before it starts: it opens the local store,
// connects and authenticates — the first node of Config.Addr, Config.Addrs that answers — and
// only then returns the Client, connected. It fails, with the store closed again, when ctx ends
// first or no node accepts the device (a refused token, a node that is down or full: the error
// says which, and carries the server's retry-after, if any). After that it behaves as a Client
// from Open: network trouble only delays, and mutations queued meanwhile are sent when the
// connection is back — including those left in the outbox by an earlier run of the app.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	c, err := open(cfg)
	if err != nil {
		return nil, err
	}
	var first *conn
	for _, addr := range c.cfg.addrs() { // the first node that answers; a definitive refusal is final
		var pe *proto.Error
		if first, err = c.dial(ctx, addr); err == nil || ctx.Err() != nil || (errors.As(err, &pe) && !pe.Code.Retryable()) {
			break
		}
	}
	if err != nil {
		c.st.Close()
		return nil, err
	}
	c.welcomed(first)
	c.setConn(first) // online from the start: a query right after Dial finds the connection
	c.start(first)
	return c, nil
}

// open validates cfg and opens the local store: a Client with no connection and nothing running.
func open(cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	st, err := store.Open(cfg.StoreDir, cfg.Logger)
	if err != nil {
		return nil, err
	}
	user, err := st.User()
	if err != nil {
		st.Close()
		return nil, err
	}
	c := &Client{cfg: cfg, st: st, events: make(chan Event, 1024), kick: make(chan struct{}, 1),
		sessions: tls.NewLRUClientSessionCache(0)}
	c.user.Store(&user)
	l := proto.Limits{}.WithDefaults() // until a Welcome says otherwise
	c.limits.Store(&l)
	c.tokens.cur = cfg.Token
	return c, nil
}

// start starts the background work: run keeps a connection up, beginning with first (nil: dial).
func (c *Client) start(first *conn) {
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.run(first)
	}()
}

// welcomed takes in what a new connection's Welcome said: its limits and the user, which is
// also stored, so that a later run opened offline knows it.
func (c *Client) welcomed(cn *conn) {
	c.limits.Store(&cn.limits)
	user := cn.welcome.User
	if old := c.user.Load(); *old != user {
		if *old != "" {
			// One store is one device of one user (PROTOCOL §8.1): the app pointed this user's
			// token at another user's store. Their entries now mix; say so loudly.
			c.cfg.Logger.Error("the local store was another user's", "store_user", *old, "user", user,
				"store", c.cfg.StoreDir)
		}
		c.user.Store(&user)
		if err := c.st.SetUser(user); err != nil {
			c.cfg.Logger.Error("store the user", "err", err)
		}
	}
}

// User returns the authenticated user: from the latest Welcome, or, before the first connection
// of a Client from Open, as an earlier run stored it ("" if this store has never connected).
func (c *Client) User() string { return *c.user.Load() }

// Connected reports whether the client has a connection up right now (between a ConnectedEvent
// and the next OfflineEvent). It may change as soon as it returns: use it for display, and
// ErrOffline from the online-only queries to decide.
func (c *Client) Connected() bool {
	c.curMu.Lock()
	defer c.curMu.Unlock()
	return c.cur != nil
}

// Events delivers what happened, in order, and is closed by Close. The app must keep reading
// it: when the buffer is full the SDK waits (it never drops an event). Besides entries and
// outbox statuses it says whether syncing works: SyncedEvent when the device is caught up,
// SyncFailedEvent when syncing keeps failing.
func (c *Client) Events() <-chan Event { return c.events }

// Close stops the background work, closes the Events channel and the local store. Queued
// mutations stay queued for the next Open or Dial. Events emitted before Close stay readable
// until the closed channel is drained.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.cancel()
		c.wg.Wait()
		close(c.events)
		c.closeErr = c.st.Close()
	})
	return c.closeErr
}

// Send queues a message to conv and returns its client_msg_id at once, connected or not; the
// message is stored (status Sending) before Send returns, so it survives an app kill. peer names
// the other user when conv is a direct conversation that may not exist yet. A body larger than
// the server's max_body (as its latest Welcome announced; before any, the protocol's 64 KiB) is
// refused at once with an *proto.Error of code proto.CodeTooLarge, and not queued.
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

// Edit queues the replacement of the body of this user's message target in conv (protocol
// revision 7). A body larger than the server's max_body is refused at once, as Send refuses it.
func (c *Client) Edit(conv string, target proto.MsgID, body []byte) (string, error) {
	if maxBody := int(c.limits.Load().MaxBody); len(body) > maxBody {
		return "", proto.Errorf(proto.CodeTooLarge, "body of %d bytes, the server accepts at most %d (max_body)", len(body), maxBody)
	}
	return c.queue(store.OutboxItem{Kind: proto.KindEdit, Conv: conv, Target: target, Body: body})
}

// React queues putting reaction on the message target of conv, or taking it off (remove)
// (protocol revision 7). A reaction the server would refuse (proto.ValidReaction) is refused at
// once with an *proto.Error of code proto.CodeInvalidArgument, and not queued.
func (c *Client) React(conv string, target proto.MsgID, reaction string, remove bool) (string, error) {
	if !proto.ValidReaction(reaction) {
		return "", proto.Errorf(proto.CodeInvalidArgument, "bad reaction %q: 1 to %d bytes of printable UTF-8, no spaces", reaction, proto.MaxReactionLen)
	}
	return c.queue(store.OutboxItem{Kind: proto.KindReaction, Conv: conv, Target: target, Reaction: reaction, Remove: remove})
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
// reconnect schedule (honoring a server's retry-after); cn is the first connection, or nil to
// dial one (a Client from Open). It reports the connection's state with ConnectedEvent and
// OfflineEvent, and counts the attempts in a row that brought no sync progress, reporting them
// with SyncFailedEvent from SyncFailureThreshold on.
func (c *Client) run(cn *conn) {
	var rc reconnect
	failures := 0
	offline := false // an OfflineEvent has been sent, and no ConnectedEvent since
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
				if !offline {
					offline = true
					c.emit(OfflineEvent{Err: err})
				}
				next = (next + 1) % len(addrs) // the next attempt tries another node
				wait := rc.failed(retryAfterOf(err))
				c.cfg.Logger.Debug("reconnect failed", "err", err, "backoff", wait)
				failures = c.syncFailed(failures, err)
				sleep(c.ctx, wait)
				continue
			}
			c.welcomed(cn)
		}
		offline = false
		c.emit(ConnectedEvent{Addr: cn.addr, Resumed: cn.resumed()})
		up := time.Now()
		progressed, err := c.serve(cn)
		cn.close()
		cn = nil
		if c.ctx.Err() != nil {
			break
		}
		offline = true
		c.emit(OfflineEvent{Err: err})
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

// ErrOffline is returned at once by the online-only queries (History, Conversations,
// FetchMembers, Receipts, Readers) while the client has no connection: before its first one (Open), and while it
// reconnects. Ask again after a ConnectedEvent; what the device stored is readable meanwhile.
var ErrOffline = errors.New("client: not connected; retry when the connection is back")

// query sends one request on the live connection, or returns ErrOffline without one.
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
// after (a page), and whether more follow; ErrOffline without a connection. (A rebase loads them
// into the local store by itself: LocalConversations lists them.)
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
// latest), ascending: "load earlier messages"; ErrOffline without a connection. It does not
// store them.
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
// (Members then returns it) and returns it; ErrOffline without a connection.
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

// queued converts an outbox item for the app; a sent message's status goes on to delivered and
// read as the peer marks say (StatusOf).
func (c *Client) queued(it store.OutboxItem) (Queued, error) {
	q := Queued{ClientMsgID: it.ClientMsgID, Kind: it.Kind, Conv: it.Conv, Status: it.Status,
		Attempts: it.Attempts, Ack: it.Ack, LastError: it.LastError}
	if it.Status == StatusSent && it.Kind == proto.KindMessage && it.Ack != nil && it.Ack.ConvSeq > 0 {
		st, err := c.st.StatusOf(it.Ack.Conv, it.Ack.ConvSeq)
		if err != nil {
			return q, err
		}
		q.Status = st
	}
	return q, nil
}

// Outbox returns every mutation this device queued, oldest first, with its status: what an app
// shows as sending, sent (or, for a message, delivered or read) or failed after a restart.
func (c *Client) Outbox() ([]Queued, error) {
	items, err := c.st.ListOutbox()
	out := make([]Queued, 0, len(items))
	for _, it := range items {
		q, qerr := c.queued(it)
		if qerr != nil {
			return out, qerr
		}
		out = append(out, q)
	}
	return out, err
}

// Lookup returns the queued mutation with the given client_msg_id.
func (c *Client) Lookup(clientMsgID string) (Queued, bool, error) {
	it, ok, err := c.st.OutboxByCMID(clientMsgID)
	if err != nil || !ok {
		return Queued{}, ok, err
	}
	q, err := c.queued(it)
	return q, err == nil, err
}

// Status is the state of a queued mutation — StatusSending, StatusSent or StatusFailed — and,
// for a sent message, of its delivery: StatusDelivered, StatusRead. Its numbers are stored on
// disk by the local store, which owns the type.
type Status = store.Status

// Statuses (PROTOCOL.md §8.3 and "Delivery states and read counts"). A message goes sending →
// sent → delivered → read, never back.
const (
	StatusSending = store.StatusSending // queued or in flight; resent after a restart
	StatusSent    = store.StatusSent    // acknowledged by the server (Ack stored)
	StatusFailed  = store.StatusFailed  // given up: a non-retryable error or retries exhausted
	// StatusDelivered: sent, and a device of another member of the conversation has stored it.
	StatusDelivered = store.StatusDelivered
	// StatusRead: sent, and another member has read it.
	StatusRead = store.StatusRead
)

// StatusOf returns how far this user's sent message at convSeq of conv got, as this device has
// learned from its log: StatusRead once another member's read mark covers it, StatusDelivered
// once one of another member's devices has stored it, else StatusSent. convSeq is the message's
// (Ack.ConvSeq, Message.ConvSeq); StatusOf does not check that the message is this user's. In
// a group one other member suffices (the exact counts: Receipts, who: Readers). It only moves
// forward; StatusEvent reports each step.
func (c *Client) StatusOf(conv string, convSeq proto.Position) (Status, error) {
	return c.st.StatusOf(conv, convSeq)
}

// PeerMark is how far one other member of a conversation has had it delivered (one of its
// devices stored it) and read, as this device has learned; Delivered ≥ Read. The local store
// owns the type.
type PeerMark = store.PeerMark

// PeerMarks returns the marks of conv's other members that this device has learned from its log
// (KindDelivered and KindReceipt entries) or a rebase, sorted by user: in a direct conversation
// the peer's; in a group those of the members whose entries reached this user — the server
// sends a delivered entry to the senders of the messages it covers, and none in a group larger
// than its status_fanout_limit (100), so for groups the counts are Receipts'. A member with no
// mark known is absent.
func (c *Client) PeerMarks(conv string) ([]PeerMark, error) {
	users, _, err := c.st.PeerMarks(conv)
	return users, err
}

// Receipts asks the server, for conv_seqs of conv (typically this user's messages on screen),
// how many members the conversation had at each, and how many of them have it delivered and
// read: one count per seq, in the order given; ErrOffline without a connection. This user must
// be a member. It asks in requests of at most proto.MaxReceiptSeqs seqs. The sender is not left
// out of the counts (proto.ReceiptCount): for "read by n others" subtract it when its own marks
// cover the message (its read mark: ReadMark).
func (c *Client) Receipts(ctx context.Context, conv string, seqs []proto.Position) ([]proto.ReceiptCount, error) {
	out := make([]proto.ReceiptCount, 0, len(seqs))
	for chunk := range slices.Chunk(seqs, proto.MaxReceiptSeqs) {
		f, err := c.query(ctx, func(id uint64) proto.Frame { return &proto.Receipts{ID: id, Conv: conv, Seqs: chunk} })
		if err != nil {
			return nil, err
		}
		r, ok := f.(*proto.ReceiptsResult)
		if !ok {
			return nil, fmt.Errorf("client: unexpected answer %v", f.FrameType())
		}
		if len(r.Counts) != len(chunk) {
			return nil, fmt.Errorf("client: %d receipt counts for %d conv_seqs", len(r.Counts), len(chunk))
		}
		out = append(out, r.Counts...)
	}
	return out, nil
}

// Readers pages, from the server, the members of conv who have its entry convSeq delivered
// (state StatusDelivered; those who read it included) or read (StatusRead), in ascending order
// of user id, after after ("" from the start), at most limit (0: the server's page size). The
// server looks at a bounded number of members per call (10,000), so a page may hold fewer users
// than limit, even none, while more is true: ask again with after = next until more is false.
// ErrOffline without a connection.
func (c *Client) Readers(ctx context.Context, conv string, convSeq proto.Position, state Status, after string, limit int) (users []string, next string, more bool, err error) {
	var kind proto.Kind
	switch state {
	case StatusDelivered:
		kind = proto.KindDelivered
	case StatusRead:
		kind = proto.KindReceipt
	default:
		return nil, "", false, fmt.Errorf("client: readers in state %v: want delivered or read", state)
	}
	f, err := c.query(ctx, func(id uint64) proto.Frame {
		return &proto.Readers{ID: id, Conv: conv, ConvSeq: convSeq, State: kind, After: after, Limit: uint32(max(limit, 0))}
	})
	if err != nil {
		return nil, "", false, err
	}
	r, ok := f.(*proto.ReadersResult)
	if !ok {
		return nil, "", false, fmt.Errorf("client: unexpected answer %v", f.FrameType())
	}
	return r.Users, r.Next, r.More, nil
}

// Message is a message of a conversation as stored on the device, for display; Messages returns
// them. The local store, which builds them, owns the type.
type Message = store.Message
