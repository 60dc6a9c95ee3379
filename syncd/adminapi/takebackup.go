package adminapi

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
	"time"
)

// BackupAPI is a node's admin API as TakeBackup uses it: syncctl's admin client, or the
// conformance kit's.
type BackupAPI interface {
	// Base is the URL of the node the client addresses, without a trailing slash.
	Base() string
	// Call sends a body-less request for path to that node and decodes a 2xx JSON answer into
	// out. An error answer is an error with a method OpsCode returning its OpsError code.
	Call(ctx context.Context, method, path string, out any) error
	// Stream sends a GET for path to the admin server at base (a URL) and returns the response
	// to a 2xx answer, whose body the caller reads and closes; errors as Call's.
	Stream(ctx context.Context, base, path string) (*http.Response, error)
}

// Error makes an OpsError an error: what TakeBackup returns when the cluster is not in a state
// to be backed up, with what to do in Hint.
func (e *OpsError) Error() string {
	if e.Code != "" {
		return e.Code + ": " + e.Message
	}
	return e.Message
}

// OpsCode is the error's code.
func (e *OpsError) OpsCode() string { return e.Code }

// errNoLeader is a shard without a leader, as the cluster view shows it: worth looking again.
var errNoLeader = &OpsError{Message: "the shard has no leader", Hint: "wait for it to elect one (syncctl cluster), then back up again"}

// TakeBackup copies the cluster the api reaches into dir (which must not exist or be empty) and
// returns its manifest, written last: a directory without one is an interrupted backup. version
// is the build that takes it (BackupManifest.Version); progress, if not nil, hears of each shard
// copied and each shard copied again. Everything acknowledged before it began is in it.
func TakeBackup(ctx context.Context, api BackupAPI, dir, version string, progress func(string)) (BackupManifest, error) {
	if progress == nil {
		progress = func(string) {}
	}
	m := BackupManifest{Format: BackupFormat, Version: version, Started: time.Now().UTC()}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return m, &OpsError{Message: dir + " is not empty", Hint: "back up into a new directory"}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return m, err
	}
	var view ClusterView
	if err := api.Call(ctx, http.MethodGet, "/v1/cluster", &view); err != nil {
		return m, err
	}
	if len(view.Moves) > 0 {
		return m, &OpsError{Message: fmt.Sprintf("%d moves in progress", len(view.Moves)), Hint: "back up once they are done (syncctl cluster)"}
	}
	state, index, err := clusterState(ctx, api)
	if err != nil {
		return m, err
	}
	if err := os.WriteFile(filepath.Join(dir, ClusterStateFile), state, 0o600); err != nil {
		return m, err
	}
	m.MapIndex = index
	copied := map[uint32]int{} // shard → its index in m.Shards
	copyShards := func(shards []ShardView) error {
		for _, s := range shards {
			bs, err := backupShard(ctx, api, view, s, dir)
			if err != nil {
				return fmt.Errorf("shard %d: %w", s.Shard, err)
			}
			progress(fmt.Sprintf("shard %d: index %d, %d bytes, from %s", bs.Shard, bs.Index, bs.Bytes, bs.Node))
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
		stale := StaleBackupShards(m.Shards)
		if len(stale) == 0 {
			break
		}
		if round == 5 {
			return m, &OpsError{Message: fmt.Sprintf("shards %v keep missing deliveries their sources trimmed meanwhile", stale),
				Hint: "run the backup again, at a quieter time"}
		}
		progress(fmt.Sprintf("copying shards %v again: their copies miss deliveries a later copy's outbox no longer holds", stale))
		var again []ShardView
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
	if _, after, err := clusterState(ctx, api); err != nil {
		return m, err
	} else if after != index {
		return m, &OpsError{Message: fmt.Sprintf("the cluster map changed during the backup (version %d, then %d)", index, after),
			Hint: "run the backup again into a new directory"}
	}
	m.Done = time.Now().UTC()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	return m, writeFileSynced(filepath.Join(dir, BackupManifestFile), b)
}

func clusterState(ctx context.Context, api BackupAPI) ([]byte, uint64, error) {
	resp, err := api.Stream(ctx, api.Base(), "/v1/backup/cluster")
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	state, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, 0, err
	}
	index, err := strconv.ParseUint(resp.Header.Get(BackupIndexHeader), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("the cluster state came without its index (%s)", BackupIndexHeader)
	}
	return state, index, nil
}

// backupShard copies shard s's state into dir from its leader's node, asking for the cluster's
// view again when the leader has changed since.
func backupShard(ctx context.Context, api BackupAPI, view ClusterView, s ShardView, dir string) (BackupShard, error) {
	bs := BackupShard{Shard: s.Shard}
	var err error
	for attempt := 0; ; attempt++ {
		if s.Leader == "" {
			err = errNoLeader
		} else {
			base := api.Base()
			if s.Leader != view.Node {
				i := slices.IndexFunc(view.Nodes, func(n ClusterNode) bool { return n.ID == s.Leader })
				if i < 0 || view.Nodes[i].AdminAddr == "" {
					return bs, fmt.Errorf("its leader, node %s, publishes no admin address", s.Leader)
				}
				base = "http://" + view.Nodes[i].AdminAddr
			}
			bs.Node = s.Leader
			if err = fetchShard(ctx, api, base, &bs, filepath.Join(dir, ShardFile(s.Shard))); err == nil {
				return bs, nil
			}
		}
		var coded interface{ OpsCode() string }
		if attempt == 4 || !errors.As(err, &coded) || (coded.OpsCode() != "not_leader" && coded.OpsCode() != "unavailable" && err != errNoLeader) {
			return bs, err
		}
		select { // an election: give it a moment, then look again
		case <-ctx.Done():
			return bs, ctx.Err()
		case <-time.After(time.Second):
		}
		if err := api.Call(ctx, http.MethodGet, "/v1/cluster", &view); err != nil {
			return bs, err
		}
		if i := slices.IndexFunc(view.Shards, func(v ShardView) bool { return v.Shard == s.Shard }); i >= 0 {
			s = view.Shards[i]
		}
	}
}

// fetchShard streams bs.Shard's state from the admin server at base into path and checks it
// against the digest the server sends after it.
func fetchShard(ctx context.Context, api BackupAPI, base string, bs *BackupShard, path string) error {
	resp, err := api.Stream(ctx, base, "/v1/backup/shards/"+strconv.FormatUint(uint64(bs.Shard), 10))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if bs.Index, err = strconv.ParseUint(resp.Header.Get(BackupIndexHeader), 10, 64); err != nil {
		return fmt.Errorf("the shard's state came without its index (%s)", BackupIndexHeader)
	}
	if bs.OutboxFirst, bs.Marks, err = ParseFanout(resp.Header.Get(BackupFanoutHeader)); err != nil {
		return fmt.Errorf("the shard's state came without its fan-out state (%s): %w", BackupFanoutHeader, err)
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
	if got := resp.Trailer.Get(BackupSumTrailer); got != bs.SHA256 {
		return fmt.Errorf("the stream was cut short or damaged (%d bytes; digest %q, expected %q)", bs.Bytes, bs.SHA256, got)
	}
	return nil
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
