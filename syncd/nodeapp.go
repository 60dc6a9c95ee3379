package syncd

import (
	"context"
	"sync/atomic"

	"github.com/syncd-dev/syncd/log"
	"github.com/syncd-dev/syncd/raftstore"
	"github.com/syncd-dev/syncd/syncd/fanout"
	"github.com/syncd-dev/syncd/syncd/peer"
)

// nodeApp is the server as its raftstore node sees it (raftstore.App). The node calls it from
// the moment raftstore.New starts the shards, before the fan-out, the call plane and the
// listeners exist, so each is reached through a pointer set once it is ready; until then
// applies wake nothing but sync streams, calls are answered "no shard" (the caller asks another
// replica) and the node publishes no addresses.
type nodeApp struct {
	notes *notifier
	fan   atomic.Pointer[fanout.Fanout]
	peer  atomic.Pointer[peer.Peer]
	attrs atomic.Pointer[map[string]string] // client and admin addresses, once bound
}

func (a *nodeApp) Applied(shard raftstore.ShardID, _ uint64) {
	if f := a.fan.Load(); f != nil {
		f.Notify(shard)
	}
}

func (a *nodeApp) LogsChanged(shard raftstore.ShardID, logs log.Touched) {
	a.notes.notify(shard, logs)
}

func (a *nodeApp) Serve(ctx context.Context, method string, payload []byte) ([]byte, error) {
	if p := a.peer.Load(); p != nil {
		return p.Serve(ctx, method, payload)
	}
	return nil, raftstore.ErrNoShard
}

func (a *nodeApp) Attrs() map[string]string {
	if m := a.attrs.Load(); m != nil {
		return *m
	}
	return nil
}
