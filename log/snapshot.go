package log

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// Snapshot format (version 1). A snapshot is the shard's state keyspace at one point in time,
// keys stored without the 5-byte shard prefix so it can be restored into another shard id:
//
//	header:  "SYNCSNAP" | version u8 (1) | source shard u32
//	record:  0x01 | uvarint key len | key suffix | uvarint value len | value     (repeated)
//	trailer: 0x00 | record count u64 | crc32c u32 of every byte before the crc
//
// The trailer makes a truncated or damaged stream detectable before the restore is declared done.

const (
	snapMagic   = "SYNCSNAP"
	snapVersion = 1
	// restoreBatchBytes bounds each Pebble batch while restoring, so a large shard does not need
	// one huge in-memory batch.
	restoreBatchBytes = 4 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Snapshot is a point-in-time view of a shard's state, for streaming to a snapshot store or a
// follower. It pins Pebble state until closed. It is safe for use by one goroutine at a time.
type Snapshot struct {
	s    *Shard
	snap *pebble.Snapshot
}

// NewSnapshot captures the shard's current state. The caller must Close it.
func (s *Shard) NewSnapshot() *Snapshot {
	return &Snapshot{s: s, snap: s.db.NewSnapshot()}
}

// Applied returns the applied Raft index recorded in the captured state.
func (sn *Snapshot) Applied() (uint64, error) {
	v, _, err := getUint(sn.snap, sn.s.k.meta(metaApplied))
	return v, err
}

// Close releases the captured state.
func (sn *Snapshot) Close() error { return sn.snap.Close() }

// WriteTo streams the captured state to w in the snapshot format. It stops at the first error
// of w (a full disk under a snapshot file, a closed connection) and returns it.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	crc := crc32.New(castagnoli)
	cw := &countWriter{w: io.MultiWriter(w, crc)}
	bw := bufio.NewWriterSize(cw, 256<<10)
	fail := func(err error) (int64, error) { return cw.n, fmt.Errorf("log: snapshot: %w", err) }
	hdr := binary.BigEndian.AppendUint32(append([]byte(snapMagic), snapVersion), uint32(sn.s.id))
	if _, err := bw.Write(hdr); err != nil {
		return fail(err)
	}
	lower, upper := sn.s.k.shardBounds()
	it, err := sn.snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fail(err)
	}
	var count uint64
	var buf []byte
	for ok := it.First(); ok; ok = it.Next() {
		key, val := it.Key()[len(lower):], it.Value()
		buf = append(buf[:0], 1)
		buf = binary.AppendUvarint(buf, uint64(len(key)))
		buf = append(buf, key...)
		buf = binary.AppendUvarint(buf, uint64(len(val)))
		if _, err := bw.Write(buf); err != nil {
			return fail(errors.Join(err, it.Close()))
		}
		if _, err := bw.Write(val); err != nil {
			return fail(errors.Join(err, it.Close()))
		}
		count++
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return fail(err)
	}
	if _, err := bw.Write(binary.BigEndian.AppendUint64([]byte{0}, count)); err != nil {
		return fail(err)
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if _, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return fail(err)
	}
	return cw.n + 4, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Restore replaces the shard's whole state with the snapshot read from r.
//
// The restore is not one atomic batch (a shard can be larger than memory), so it is bracketed by
// a "restoring" marker, written and synced first and cleared, synced, only after the trailer's
// record count and checksum match. If the process dies in between, [Shard.NeedsRestore] reports
// it on the next start and the caller restores again; if the stream is damaged, Restore returns
// an error wrapping ErrCorrupt and the marker stays.
func (s *Shard) Restore(r io.Reader) error {
	fail := func(err error) error { return fmt.Errorf("log: restore shard %d: %w", s.id, err) }
	// The header first: a stream that is not a snapshot of this version (a later build's, in a
	// mixed cluster during an upgrade) is refused before anything of the state is touched.
	br := &hashingReader{r: bufio.NewReaderSize(r, 256<<10), crc: crc32.New(castagnoli)}
	hdr := make([]byte, len(snapMagic)+5)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return corruptf("snapshot header: %v", err)
	}
	if string(hdr[:len(snapMagic)]) != snapMagic || hdr[len(snapMagic)] != snapVersion {
		return corruptf("not a version %d syncd snapshot (version %d): refused, the state is unchanged; "+
			"a node receives a later version only from a newer leader: upgrade this node", snapVersion, hdr[len(snapMagic)])
	}

	clear(s.metas) // every cached meta is about to be replaced
	lower, upper := s.k.shardBounds()
	start := s.db.NewBatch()
	err := errors.Join(start.DeleteRange(lower, upper, nil), start.Set(s.k.meta(metaRestoring), encodeUint(1), nil))
	if err == nil {
		err = start.Commit(pebble.Sync)
	}
	if err = errors.Join(err, start.Close()); err != nil {
		return fail(err)
	}
	var count uint64
	b := s.db.NewBatch()
	defer func() {
		if b != nil {
			b.Close() // after its commit, or discarding it: it holds only memory then
		}
	}()
	for {
		tag, err := br.ReadByte()
		if err != nil {
			return corruptf("snapshot truncated after %d records", count)
		}
		if tag == 0 {
			break
		}
		key, err1 := readChunk(br)
		val, err2 := readChunk(br)
		if tag != 1 || err1 != nil || err2 != nil || len(key) == 0 {
			return corruptf("snapshot record %d malformed", count)
		}
		if err := b.Set(append(append([]byte(nil), lower...), key...), val, nil); err != nil {
			return fail(err)
		}
		count++
		if b.Len() >= restoreBatchBytes {
			err := errors.Join(b.Commit(pebble.NoSync), b.Close())
			b = nil // closed: the deferred Close must not release it a second time
			if err != nil {
				return fail(err)
			}
			b = s.db.NewBatch()
		}
	}
	var trailer [8]byte
	if _, err := io.ReadFull(br, trailer[:]); err != nil {
		return corruptf("snapshot trailer truncated")
	}
	sum := br.crc.Sum32()
	var crcBytes [4]byte
	if _, err := io.ReadFull(br.r, crcBytes[:]); err != nil {
		return corruptf("snapshot checksum truncated")
	}
	if binary.BigEndian.Uint64(trailer[:]) != count {
		return corruptf("snapshot holds %d records, trailer says %d", count, binary.BigEndian.Uint64(trailer[:]))
	}
	if binary.BigEndian.Uint32(crcBytes[:]) != sum {
		return corruptf("snapshot checksum mismatch")
	}
	if err := b.Delete(s.k.meta(metaRestoring), nil); err != nil {
		return fail(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fail(err)
	}
	return s.loadMoves()
}

// hashingReader checksums exactly the bytes consumed, not what bufio reads ahead.
type hashingReader struct {
	r   *bufio.Reader
	crc hash.Hash32
}

func (h *hashingReader) ReadByte() (byte, error) {
	b, err := h.r.ReadByte()
	if err == nil {
		h.crc.Write([]byte{b})
	}
	return b, err
}

func (h *hashingReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.crc.Write(p[:n])
	return n, err
}

func readChunk(br *hashingReader) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, err
	}
	if n > 1<<26 { // no stored key or value comes near 64 MiB
		return nil, errors.New("chunk too large")
	}
	buf := make([]byte, n)
	_, err = io.ReadFull(br, buf)
	return buf, err
}
