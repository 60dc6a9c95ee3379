package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/buildinfo"
)

func runBackup(ctx context.Context, e *env, args []string) int {
	const cmd = "backup"
	f := newFlagSet(e, cmd, "[-admin host:port] -dir <dir>", `
Backs up the whole cluster, online, into -dir (which must not exist, or be empty): the cluster's
state (the map of shards, users' and conversations' placement, device revocations) and every data
shard's state, each as of one Raft index, read from a replica while traffic runs. Everything
acknowledged before the backup began is in it. Each shard is read from its leader's node, whose
admin address the cluster lists and which must accept the same admin token (a shared
admin_token_file). Refused while a move or split is in
progress. Its manifest.json lists each shard's index and SHA-256; restore with syncd restore
(docs/OPERATIONS.md, "Backup and restore").`, `
syncctl backup -admin 127.0.0.1:7380 -dir /var/backups/syncd/2026-12-03`)
	var admin adminFlags
	admin.register(f)
	dir := f.String("dir", "", "the `directory` to back up into (required; created if missing, refused unless empty)")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *dir == "" {
		fmt.Fprintln(e.stderr, "syncctl backup: -dir is required (see -h)")
		return exitUsage
	}
	m, err := backup(ctx, e, &admin, *dir)
	if err != nil {
		e.reportAdmin(cmd, err)
		return exitFail
	}
	var bytes int64
	for _, s := range m.Shards {
		bytes += s.Bytes
	}
	fmt.Fprintf(e.stdout, "backed up %d shards (%d bytes) and the cluster map (version %d) into %s in %s\n",
		len(m.Shards), bytes, m.MapIndex, *dir, m.Done.Sub(m.Started).Round(time.Millisecond))
	return exitOK
}

// backup copies the cluster into dir and returns its manifest, written last: a directory without
// one is an interrupted backup.
func backup(ctx context.Context, e *env, admin *adminFlags, dir string) (adminapi.BackupManifest, error) {
	m := adminapi.BackupManifest{Format: adminapi.BackupFormat, Version: buildinfo.Get().String(), Started: time.Now().UTC()}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return m, &adminError{Message: dir + " is not empty", Hint: "back up into a new directory"}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return m, err
	}
	var view adminapi.ClusterView
	if err := admin.call(ctx, http.MethodGet, "/v1/cluster", &view); err != nil {
		return m, err
	}
	if len(view.Moves) > 0 {
		return m, &adminError{Message: fmt.Sprintf("%d moves in progress", len(view.Moves)), Hint: "back up once they are done (syncctl cluster)"}
	}
	state, index, err := clusterState(ctx, admin)
	if err != nil {
		return m, err
	}
	if err := os.WriteFile(filepath.Join(dir, adminapi.ClusterStateFile), state, 0o600); err != nil {
		return m, err
	}
	m.MapIndex = index
	copied := map[uint32]int{} // shard → its index in m.Shards
	copyShards := func(shards []adminapi.ShardView) error {
		for _, s := range shards {
			bs, err := backupShard(ctx, admin, view, s, dir)
			if err != nil {
				return fmt.Errorf("shard %d: %w", s.Shard, err)
			}
			fmt.Fprintf(e.stderr, "shard %d: index %d, %d bytes, from %s\n", bs.Shard, bs.Index, bs.Bytes, bs.Node)
			if i, ok := copied[bs.Shard]; ok {
				m.Shards[i] = bs
			} else {
				copied[bs.Shard] = len(m.Shards)
				m.Shards = append(m.Shards, bs)
			}
		}
		return nil
	}
	if err := copyShards(view.Shards); err != nil {
		return m, err
	}
	// A message delivered and trimmed from its source's outbox between the copy of one of its
	// recipients' shards and the copy of the source is in neither: copy those recipients'
	// shards again, which then hold it. Each round copies later than every copy before it.
	for round := 0; ; round++ {
		stale := adminapi.StaleBackupShards(m.Shards)
		if len(stale) == 0 {
			break
		}
		if round == 5 {
			return m, &adminError{Message: fmt.Sprintf("shards %v keep missing deliveries their sources trimmed meanwhile", stale),
				Hint: "run the backup again, at a quieter time"}
		}
		fmt.Fprintf(e.stderr, "copying shards %v again: their copies miss deliveries a later copy's outbox no longer holds\n", stale)
		var again []adminapi.ShardView
		for _, s := range view.Shards {
			if slices.Contains(stale, s.Shard) {
				again = append(again, s)
			}
		}
		if err := copyShards(again); err != nil {
			return m, err
		}
	}
	// A move started, or a node joined or left, while the shards were copied: the map saved
	// first may not say where what the shards hold lives.
	if _, after, err := clusterState(ctx, admin); err != nil {
		return m, err
	} else if after != index {
		return m, &adminError{Message: fmt.Sprintf("the cluster map changed during the backup (version %d, then %d)", index, after),
			Hint: "run the backup again into a new directory"}
	}
	m.Done = time.Now().UTC()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	return m, writeFileSynced(filepath.Join(dir, adminapi.BackupManifestFile), b)
}

func clusterState(ctx context.Context, admin *adminFlags) ([]byte, uint64, error) {
	resp, err := admin.get(ctx, admin.base(), "/v1/backup/cluster")
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	state, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, 0, err
	}
	index, err := strconv.ParseUint(resp.Header.Get(adminapi.BackupIndexHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("the cluster state came without its index (%s)", adminapi.BackupIndexHeader)
	}
	return state, index, nil
}

// backupShard copies shard s's state into dir from its leader's node, asking for the cluster's
// view again when the leader has changed since.
func backupShard(ctx context.Context, admin *adminFlags, view adminapi.ClusterView, s adminapi.ShardView, dir string) (adminapi.BackupShard, error) {
	bs := adminapi.BackupShard{Shard: s.Shard}
	var err error
	for attempt := 0; ; attempt++ {
		if s.Leader == "" {
			err = &adminError{Message: "the shard has no leader", Hint: "wait for it to elect one (syncctl cluster), then back up again"}
		} else {
			base := admin.base()
			if s.Leader != view.Node {
				i := slices.IndexFunc(view.Nodes, func(n adminapi.ClusterNode) bool { return n.ID == s.Leader })
				if i < 0 || view.Nodes[i].AdminAddr == "" {
					return bs, fmt.Errorf("its leader, node %s, publishes no admin address", s.Leader)
				}
				base = "http://" + view.Nodes[i].AdminAddr
			}
			bs.Node = s.Leader
			if err = fetchShard(ctx, admin, base, &bs, filepath.Join(dir, adminapi.ShardFile(s.Shard))); err == nil {
				return bs, nil
			}
		}
		var ae *adminError
		if attempt == 4 || !errors.As(err, &ae) || (ae.Code != "not_leader" && ae.Code != "unavailable" && ae.Message != "the shard has no leader") {
			return bs, err
		}
		select { // an election: give it a moment, then look again
		case <-ctx.Done():
			return bs, ctx.Err()
		case <-time.After(time.Second):
		}
		if err := admin.call(ctx, http.MethodGet, "/v1/cluster", &view); err != nil {
			return bs, err
		}
		if i := slices.IndexFunc(view.Shards, func(v adminapi.ShardView) bool { return v.Shard == s.Shard }); i >= 0 {
			s = view.Shards[i]
		}
	}
}

// fetchShard streams bs.Shard's state from the admin server at base into path and checks it
// against the digest the server sends after it.
func fetchShard(ctx context.Context, admin *adminFlags, base string, bs *adminapi.BackupShard, path string) error {
	resp, err := admin.get(ctx, base, "/v1/backup/shards/"+strconv.FormatUint(uint64(bs.Shard), 10))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if bs.Index, err = strconv.ParseUint(resp.Header.Get(adminapi.BackupIndexHeader), 10, 64); err != nil {
		return fmt.Errorf("the shard's state came without its index (%s)", adminapi.BackupIndexHeader)
	}
	if bs.OutboxFirst, bs.Marks, err = adminapi.ParseFanout(resp.Header.Get(adminapi.BackupFanoutHeader)); err != nil {
		return fmt.Errorf("the shard's state came without its fan-out state (%s): %w", adminapi.BackupFanoutHeader, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	sum := sha256.New()
	bs.Bytes, err = io.Copy(io.MultiWriter(f, sum), resp.Body)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return err
	}
	bs.SHA256 = hex.EncodeToString(sum.Sum(nil))
	if got := resp.Trailer.Get(adminapi.BackupSumTrailer); got != bs.SHA256 {
		return fmt.Errorf("the stream was cut short or damaged (%d bytes; digest %q, expected %q)", bs.Bytes, bs.SHA256, got)
	}
	return nil
}

// get sends a GET for path to the admin server at base with the admin token and returns the
// response to a 2xx answer, whose body the caller reads and closes; other answers become an
// *adminError. Only the wait for the response's headers is bounded by -timeout: a shard's state
// may take longer to stream.
func (a *adminFlags) get(ctx context.Context, base, path string) (*http.Response, error) {
	if err := a.resolveToken(); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	if a.token != "" {
		adminapi.Authorize(req, a.token)
	}
	if a.streams == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = *a.timeout
		a.streams = &http.Client{Transport: tr}
	}
	resp, err := a.streams.Do(req)
	if err != nil {
		return nil, &adminError{Message: err.Error(), Hint: fmt.Sprintf("is syncd running with -admin %s?", strings.TrimPrefix(base, "http://"))}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return nil, a.answerError(resp.StatusCode, body)
	}
	return resp, nil
}

// writeFileSynced writes b to path and syncs it and its directory.
func writeFileSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
