package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// measureEtcd starts an etcd cluster of members members (member i on 127.0.0.<i+1>), runs the
// shapes on it, and stops it. A missing binary or a cluster that does not start is reported in
// the results; the error is for this program's own failures only.
func measureEtcd(ctx context.Context, bin string, members int, sh shapes) error {
	sys := system{name: fmt.Sprintf("etcd, %d member", members), nodes: members}
	if members > 1 {
		sys.name += "s"
	}
	path, skip := notInstalled(sys, bin, "etcd-server")
	if skip {
		return nil
	}
	if v := version(path, "etcd Version: ", "--version"); v != "" {
		sys.name = "etcd " + v + strings.TrimPrefix(sys.name, "etcd")
	}
	dir, err := os.MkdirTemp("", "syncbench-etcd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	progress("%s: starting in %s", sys.name, dir)
	servers, endpoints, err := startEtcd(path, dir, members)
	sys.servers = servers
	defer func() {
		for _, s := range servers {
			if err := s.stop(); err != nil {
				progress("%s: %v", sys.name, err)
			}
		}
	}()
	if err != nil {
		sys.fail(err)
		return nil
	}
	st, err := newEtcdStore(endpoints, sh.conns)
	if err != nil {
		sys.fail(err)
		return nil
	}
	defer st.close()
	// Ready: a linearizable read, which needs a leader and a quorum.
	if err := waitUntil(ctx, servers, func(ctx context.Context) error {
		_, err := st.clients[0].Get(ctx, "/ready")
		return err
	}); err != nil {
		sys.fail(err)
		return nil
	}
	progress("%s: ready on %s", sys.name, strings.Join(endpoints, ", "))
	measure(ctx, st, sys, sh)
	return nil
}

// startEtcd starts the members of a new cluster in dir and returns them with their client
// endpoints. Defaults otherwise: WAL fsynced, a put acked once committed by a quorum and applied.
func startEtcd(bin, dir string, members int) ([]*server, []string, error) {
	type member struct {
		name, ip     string
		client, peer string
	}
	ms := make([]member, members)
	var initial []string
	for i := range ms {
		ip := "127.0.0." + strconv.Itoa(i+1)
		cp, err := freePort(ip)
		if err != nil {
			return nil, nil, err
		}
		pp, err := freePort(ip)
		if err != nil {
			return nil, nil, err
		}
		ms[i] = member{name: "m" + strconv.Itoa(i), ip: ip,
			client: fmt.Sprintf("http://%s:%d", ip, cp), peer: fmt.Sprintf("http://%s:%d", ip, pp)}
		initial = append(initial, ms[i].name+"="+ms[i].peer)
	}
	var servers []*server
	var endpoints []string
	for _, m := range ms {
		s, err := startServer("etcd "+m.name, bin, filepath.Join(dir, m.name+".log"),
			"--name", m.name, "--data-dir", filepath.Join(dir, m.name),
			"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
			"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", filepath.Base(dir),
			"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn")
		if err != nil {
			return servers, nil, err
		}
		servers = append(servers, s)
		endpoints = append(endpoints, m.client)
	}
	return servers, endpoints, nil
}

// etcdStore is the shapes' view of an etcd cluster: conns clients, each balancing over every
// member's endpoint (as an application's would), used in turn.
type etcdStore struct {
	clients []*clientv3.Client
	next    atomic.Uint64
	mu      sync.Mutex
	seqs    map[string]*atomic.Uint64 // each log's last position handed out
}

func newEtcdStore(endpoints []string, conns int) (*etcdStore, error) {
	st := &etcdStore{seqs: map[string]*atomic.Uint64{}}
	for range conns {
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			st.close()
			return nil, fmt.Errorf("etcd client: %w", err)
		}
		st.clients = append(st.clients, c)
	}
	return st, nil
}

func (st *etcdStore) close() {
	for _, c := range st.clients {
		c.Close()
	}
}

func (st *etcdStore) client() *clientv3.Client {
	return st.clients[st.next.Add(1)%uint64(len(st.clients))]
}

// prefix is user's log: every key under it is one entry.
func prefix(user string) string { return "/u/" + user + "/" }

// key is the key of the entry at position seq of user's log: zero-padded, so key order is
// position order.
func key(user string, seq uint64) string { return fmt.Sprintf("%s%020d", prefix(user), seq) }

// nextSeq hands out the next position of user's log.
func (st *etcdStore) nextSeq(user string) uint64 {
	st.mu.Lock()
	c, ok := st.seqs[user]
	if !ok {
		c = new(atomic.Uint64)
		st.seqs[user] = c
	}
	st.mu.Unlock()
	return c.Add(1)
}

func (st *etcdStore) append(ctx context.Context, user string, value []byte) error {
	_, err := st.client().Put(ctx, key(user, st.nextSeq(user)), string(value))
	return err
}

func (st *etcdStore) subscribe(ctx context.Context, user string, fn func([]byte), fail func(error)) error {
	wch := st.client().Watch(ctx, prefix(user), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	select {
	case wr, ok := <-wch:
		if !ok {
			return errors.New("etcd watch closed before it was created")
		}
		if err := wr.Err(); err != nil {
			return err
		}
		if !wr.Created {
			return errors.New("etcd watch: the first answer is not its creation")
		}
	case <-time.After(requestTimeout):
		return errors.New("etcd watch not created in time")
	}
	go func() {
		for wr := range wch {
			if err := wr.Err(); err != nil {
				fail(err)
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					fn(ev.Kv.Value)
				}
			}
		}
	}()
	return nil
}

func (st *etcdStore) read(ctx context.Context, user string, page int, fn func([]byte)) (int, error) {
	c := st.client()
	from, end := prefix(user), clientv3.GetPrefixRangeEnd(prefix(user))
	n := 0
	last := ""
	for {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		resp, err := c.Get(rctx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(page)))
		cancel()
		if err != nil {
			return n, err
		}
		for _, kv := range resp.Kvs {
			if k := string(kv.Key); k <= last {
				return n, fmt.Errorf("etcd range: key %q after %q", k, last)
			}
			last = string(kv.Key)
			fn(kv.Value)
			n++
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return n, nil
		}
		from = last + "\x00" // the next page starts just past this one's last key
	}
}
