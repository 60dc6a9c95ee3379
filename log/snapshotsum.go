package log

import "context"

// StateChecksum returns the checksum of the captured state and its number of keys, computed as
// [Shard.StateChecksum] computes them of the current state: two replicas' snapshots taken at the
// same applied index return the same pair exactly when they hold the same state. It reads every
// key of the shard, so it can take long on a large one; it gives up with ctx's error once ctx
// ends.
func (sn *Snapshot) StateChecksum(ctx context.Context) (sum, keys uint64, err error) {
	lower, upper := sn.s.k.shardBounds()
	return checksumRange(ctx, sn.snap, lower, upper, len(lower))
}

// checksumCheckEvery is how many keys checksumRange reads between two looks at its context.
const checksumCheckEvery = 4096
