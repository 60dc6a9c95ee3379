package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// measureRedis starts a Redis server with every write fsynced before its reply, runs the shapes
// on it, and stops it. A missing binary or a server that does not start is reported in the
// results; the error is for this program's own failures only.
func measureRedis(ctx context.Context, bin string, sh shapes) error {
	sys := system{name: "Redis, appendfsync always", nodes: 1}
	path, skip := notInstalled(sys, bin, "redis-server")
	if skip {
		return nil
	}
	if v := version(path, "v=", "--version"); v != "" {
		sys.name = "Redis " + v + ", appendfsync always"
	}
	dir, err := os.MkdirTemp("", "syncbench-redis-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port, err := freePort("127.0.0.1")
	if err != nil {
		return err
	}
	progress("%s: starting in %s", sys.name, dir)
	// appendfsync always: the AOF is written and fsynced before the replies of the commands in
	// it go out, so an XADD's reply is a durable ack. No RDB snapshots (save ""): the AOF is the
	// durability, as a deployment choosing appendfsync always would run it.
	srv, err := startServer("redis-server", path, filepath.Join(dir, "redis.log"),
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--protected-mode", "yes", "--loglevel", "warning")
	if err != nil {
		sys.fail(err)
		return nil
	}
	sys.servers = []*server{srv}
	defer func() {
		if err := srv.stop(); err != nil {
			progress("%s: %v", sys.name, err)
		}
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	st := newRedisStore(addr, sh)
	defer st.close()
	if err := waitUntil(ctx, []*server{srv}, func(ctx context.Context) error {
		return st.writes.Ping(ctx).Err()
	}); err != nil {
		sys.fail(err)
		return nil
	}
	if got, err := st.writes.ConfigGet(ctx, "appendfsync").Result(); err != nil || got["appendfsync"] != "always" {
		sys.fail(fmt.Errorf("appendfsync is %q (%v), not always", got["appendfsync"], err))
		return nil
	}
	progress("%s: ready on %s", sys.name, addr)
	measure(ctx, st, sys, sh)
	return nil
}

// redisStore is the shapes' view of a Redis server: one client (a connection pool) for the
// appends and reads, another for the subscribers, each of which holds a connection in XREAD.
type redisStore struct {
	writes, subs *redis.Client
}

func newRedisStore(addr string, sh shapes) *redisStore {
	opts := func(pool int) *redis.Options {
		// Protocol 2, and no CLIENT SETINFO: plain RESP, what every Redis 7 answers.
		return &redis.Options{Addr: addr, PoolSize: pool, Protocol: 2, DisableIdentity: true,
			ReadTimeout: requestTimeout, WriteTimeout: requestTimeout}
	}
	return &redisStore{writes: redis.NewClient(opts(sh.writers + 8)), subs: redis.NewClient(opts(sh.subscribers + 8))}
}

func (st *redisStore) close() {
	st.writes.Close()
	st.subs.Close()
}

// stream is user's log.
func stream(user string) string { return "u:" + user }

func (st *redisStore) append(ctx context.Context, user string, value []byte) error {
	return st.writes.XAdd(ctx, &redis.XAddArgs{Stream: stream(user), ID: "*", Values: []any{"v", value}}).Err()
}

// subscribeBlock is how long one XREAD of a subscriber blocks before it is sent again (to notice
// that its context ended).
const subscribeBlock = time.Second

func (st *redisStore) subscribe(ctx context.Context, user string, fn func([]byte), fail func(error)) error {
	key := stream(user)
	last := "0-0" // the log is fresh: from its start is from its end
	// A first read, not blocking (Block < 0: no BLOCK argument), so the subscriber's connection
	// is open before appends start.
	if err := st.subs.XRead(ctx, &redis.XReadArgs{Streams: []string{key, last}, Count: 1000, Block: -1}).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	go func() {
		for ctx.Err() == nil {
			res, err := st.subs.XRead(ctx, &redis.XReadArgs{Streams: []string{key, last}, Count: 1000, Block: subscribeBlock}).Result()
			if errors.Is(err, redis.Nil) {
				continue // nothing within subscribeBlock
			}
			if err != nil {
				if ctx.Err() == nil {
					fail(err)
				}
				return
			}
			for _, s := range res {
				for _, m := range s.Messages {
					last = m.ID
					v, _ := m.Values["v"].(string)
					fn([]byte(v))
				}
			}
		}
	}()
	return nil
}

func (st *redisStore) read(ctx context.Context, user string, page int, fn func([]byte)) (int, error) {
	key := stream(user)
	from := "-"
	n := 0
	for {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		msgs, err := st.writes.XRangeN(rctx, key, from, "+", int64(page)).Result()
		cancel()
		if err != nil {
			return n, err
		}
		for _, m := range msgs {
			v, _ := m.Values["v"].(string)
			fn([]byte(v))
			n++
		}
		if len(msgs) < page {
			return n, nil
		}
		from = "(" + msgs[len(msgs)-1].ID // the next page starts just past this one's last ID
	}
}
