package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/proto"
)

// tokens is the token in hand: what the next Hello presents, when it expires (as the server
// announced it), and whether the server refused it. Safe for concurrent use.
type tokens struct {
	mu      sync.Mutex
	cur     string
	expires time.Time // zero until a Welcome or Refreshed announced it
	refused bool      // the server refused cur (unauthenticated, token_expired)
}

// refreshLead is how long before a token's expiry the SDK replaces it: a quarter of the
// remaining validity, at most maxRefreshLead, so a short token is refreshed in time and a long
// one not needlessly early.
func refreshLead(remaining time.Duration) time.Duration { return min(remaining/4, maxRefreshLead) }

const maxRefreshLead = 5 * time.Minute

// get returns the token for the next Hello: the one in hand, or a fresh one from TokenSource
// when there is none, the server refused it, or it expires within RequestTimeout.
func (t *tokens) get(ctx context.Context, cfg *Config) (string, error) {
	t.mu.Lock()
	cur, exp, refused := t.cur, t.expires, t.refused
	t.mu.Unlock()
	// A token that expires before a request could even time out is of no use for a new session.
	stale := !exp.IsZero() && time.Until(exp) < cfg.RequestTimeout
	if cfg.TokenSource == nil || (cur != "" && !refused && !stale) {
		return cur, nil
	}
	tok, err := cfg.TokenSource(ctx)
	if err != nil {
		return "", fmt.Errorf("client: TokenSource: %w", err)
	}
	t.mu.Lock()
	t.cur, t.expires, t.refused = tok, time.Time{}, false
	t.mu.Unlock()
	return tok, nil
}

// welcomed records that the server accepted tok until expires (Unix ns; 0 from a server that
// does not say).
func (t *tokens) welcomed(tok string, expires int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cur, t.refused = tok, false
	if expires > 0 {
		t.expires = time.Unix(0, expires)
	}
}

// refusedIf records that the server refused the token in hand, if err says so.
func (t *tokens) refusedIf(err error) {
	if proto.IsCode(err, proto.CodeUnauthenticated) || proto.IsCode(err, proto.CodeTokenExpired) {
		t.mu.Lock()
		t.refused = true
		t.mu.Unlock()
	}
}

// keepToken keeps cn's session under a valid token: ahead of each expiry the server announced it
// gets a new token from TokenSource and presents it with Refresh (PROTOCOL §6). A refresh that
// fails is tried again in half the time left; if none succeeds, the server ends the session at
// the expiry and the SDK reconnects with a fresh token. It returns when ctx ends or the
// connection does; without TokenSource it has nothing to do.
func (c *Client) keepToken(ctx context.Context, cn *conn) {
	if c.cfg.TokenSource == nil || cn.welcome.TokenExpires == 0 {
		return
	}
	exp := time.Unix(0, cn.welcome.TokenExpires)
	wait := time.Until(exp) - refreshLead(time.Until(exp))
	for {
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-cn.ctlEnded:
			t.Stop()
			return
		case <-t.C:
		}
		next, err := c.refresh(ctx, cn)
		if err == nil {
			exp = next
			wait = time.Until(exp) - refreshLead(time.Until(exp))
			continue
		}
		if ctx.Err() != nil {
			return
		}
		c.cfg.Logger.Debug("token refresh failed", "err", err, "expires", exp)
		wait = max(time.Until(exp)/2, time.Second) // past the expiry the server closes: the loop ends
	}
}

// refresh presents a fresh token on cn's control stream and returns its expiry.
func (c *Client) refresh(ctx context.Context, cn *conn) (time.Time, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	tok, err := c.cfg.TokenSource(rctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("client: TokenSource: %w", err)
	}
	select {
	case <-cn.answers: // a late answer to an earlier refresh that timed out
	default:
	}
	if err := cn.writeControl(&proto.Refresh{Token: tok}, c.cfg.RequestTimeout); err != nil {
		return time.Time{}, err
	}
	select {
	case <-rctx.Done():
		return time.Time{}, rctx.Err()
	case <-cn.ctlEnded:
		return time.Time{}, errors.New("client: the control stream ended")
	case f := <-cn.answers:
		switch f := f.(type) {
		case *proto.Refreshed:
			c.tokens.welcomed(tok, f.TokenExpires)
			return time.Unix(0, f.TokenExpires), nil
		case *proto.Error:
			return time.Time{}, f
		}
		return time.Time{}, fmt.Errorf("client: unexpected answer to refresh: %v", f.FrameType())
	}
}
