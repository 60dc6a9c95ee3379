package syncd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/proto"
)

// The groups-per-user quota (Config.MaxGroupsPerUser, checkGroupsPerUser) has two parts, so that
// nobody can spend another user's quota and lock them out of every group (issue #21: one user put
// a victim into 1,000 groups, after which nobody could add the victim to any):
//
//   - strangers, users the named user has not talked to, together fill at most strangerGroups
//     of the quota (four fifths);
//   - the rest is kept for the people the named user has talked to and for the user's own
//     creations, which count against the whole quota.
//
// "Talked to" is the named user's consent, read from replicated state the adder cannot write:
// the named user has a read mark in their direct conversation with the adder (their device
// marked a message of it read). A stranger who writes to the victim first gains nothing until
// the victim reads it.
//
// Concurrent creators cannot pass the quota together through one node (eight of them got a
// victim into 20 groups with a cap of 10): the count is the named user's shard's, which trails
// the deliveries in flight, so each change that passes the check holds a place (groupSeats)
// until the count shows it, or for seatHold at most. Through several nodes the bound is each
// node's: a user may pass a threshold by the changes other nodes admitted within the delivery
// latency (docs/DECISIONS.md, D35 and D48).

// strangerGroups is how many of limit groups users the named user has not talked to may fill.
func strangerGroups(limit int) int { return limit - limit/5 }

// seatHold is how long a change that passed the check holds its place at most: a delivery lands
// in milliseconds on a healthy cluster; one later than this no longer counts against concurrent
// changes (the bound then rests on the count alone).
const seatHold = 2 * time.Second

// groupSeats holds the places of changes that passed the quota check and are not yet in their
// named users' counts, per user, on this node. Safe for concurrent use.
type groupSeats struct {
	mu      sync.Mutex
	pending map[string][]seat // by user
	// counted is, per user with seats held, the highest count a check brought: counts are read
	// before the lock, so a check may come with a count older than one that already dropped the
	// seats it shows, and would then miss those seats twice (one creation too many got through).
	counted map[string]int
	// sweep is when admit next drops every expired seat: a user named once and never again
	// would otherwise keep its seats for good.
	sweep time.Time
}

// seat is one admitted change naming a user: it anticipated the user's count to reach want.
type seat struct {
	want    int
	expires time.Time
}

// seatsLocked drops uid's seats that its count n (or a higher one a check brought while seats
// were held) shows, want <= n, or that expired, and returns that count plus the seats that
// remain. REQUIRES: g.mu.
func (g *groupSeats) seatsLocked(uid string, n int, now time.Time) (effective int) {
	n = max(n, g.counted[uid])
	kept := g.pending[uid][:0]
	for _, s := range g.pending[uid] {
		if s.want > n && now.Before(s.expires) {
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		delete(g.pending, uid)
		delete(g.counted, uid)
	} else {
		g.pending[uid], g.counted[uid] = kept, n
	}
	return n + len(kept)
}

// effective returns uid's count n plus the seats still held for it.
func (g *groupSeats) effective(uid string, n int, now time.Time) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seatsLocked(uid, n, now)
}

// admit checks every named user's count (counts[i], the shard's) plus its held seats against
// its limit (limits(i, effective count): nil to pass) and, if all pass, holds a seat for each.
// The check and the seats are one step under the lock, so concurrent changes see each other.
func (g *groupSeats) admit(named []string, counts []int, now time.Time, check func(i, eff int) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending == nil {
		g.pending, g.counted = map[string][]seat{}, map[string]int{}
	}
	if !now.Before(g.sweep) { // at most once per seatHold: the map holds what was admitted in one
		for uid, seats := range g.pending {
			if !now.Before(seats[len(seats)-1].expires) { // the last is the latest
				delete(g.pending, uid)
				delete(g.counted, uid)
			}
		}
		g.sweep = now.Add(seatHold)
	}
	effs := make([]int, len(named))
	for i, uid := range named {
		effs[i] = g.seatsLocked(uid, counts[i], now)
		if err := check(i, effs[i]); err != nil {
			return err
		}
	}
	for i, uid := range named {
		g.pending[uid] = append(g.pending[uid], seat{want: effs[i] + 1, expires: now.Add(seatHold)})
		g.counted[uid] = max(g.counted[uid], counts[i])
	}
	return nil
}

// talkedTo reports whether uid has talked to adder: uid has a read mark in their direct
// conversation. A conversation that does not exist, or a read that fails, is no consent (the
// change is then held to the strangers' share, never refused for the read).
func (s *Server) talkedTo(ctx context.Context, uid, adder string) bool {
	conv := proto.DirectConv(uid, adder)
	r, err := s.reader(ctx, s.slots.ConvShard(conv))
	if err != nil {
		return false
	}
	st, err := r.Conversation(conv, uid)
	if err != nil {
		if !errors.Is(err, log.ErrNoConversation) && !errors.Is(err, log.ErrNotMember) {
			s.logger.Debug("group quota: could not read a direct conversation; counting the adder as a stranger", "conv", conv, "err", err)
		}
		return false
	}
	return st.ReadMark >= 1
}
