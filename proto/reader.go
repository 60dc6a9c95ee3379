package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Reader reads frames from a stream. It is not safe for concurrent use; give each stream one.
//
// Next returns io.EOF when the stream ends cleanly between frames and io.ErrUnexpectedEOF when
// it ends inside one. Otherwise its errors wrap these sentinels:
//
//   - ErrFrameTooLarge: the declared length exceeds the limit. The frame is not read, so the
//     next one cannot be found: every later call returns the same error; close the stream.
//   - ErrBadVersion: the version byte is not FrameVersion. The frame was consumed.
//   - ErrUnknownType: the frame type is unknown. The frame was consumed; the stream can go on.
//   - ErrMalformed: the body does not decode (or the frame is shorter than its header). The
//     frame was consumed; the stream can go on.
//
// I/O errors and ErrFrameTooLarge are sticky: later calls return them again.
//
// Memory: a Reader keeps a buffer of at most 1 KiB between frames, enough for acks,
// heartbeats and short messages, so idle streams cost little. Larger frames are read into
// 128 KiB buffers shared by all Readers through a pool (a full-size message or a typical batch
// fits); a frame beyond that grows its buffer with the bytes actually received, doubling up to
// the declared length. So a declared length alone never costs more than 128 KiB, and a peer
// that declares a large frame and sends little costs little.
type Reader struct {
	r     io.Reader
	max   int
	hdr   [4]byte
	small []byte // kept between frames
	err   error  // sticky
}

// Buffer sizes of the Reader.
const (
	smallBuf = 1 << 10   // kept by each Reader
	poolBuf  = 128 << 10 // shared through framePool
)

// framePool holds poolBuf-byte frame buffers.
var framePool = sync.Pool{New: func() any { b := make([]byte, poolBuf); return &b }}

// NewReader returns a Reader of frames from r whose length field (version + type + body) is at
// most maxFrame bytes. A maxFrame of 0 or less means DefaultMaxFrame; more than MaxFrameLimit
// means MaxFrameLimit. Reader does no buffering of its own beyond the current frame.
func NewReader(r io.Reader, maxFrame int) *Reader {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	return &Reader{r: r, max: min(maxFrame, MaxFrameLimit)}
}

// SetMaxFrame changes the limit for the following frames, with NewReader's rules (used once
// Welcome announces the connection's max_frame).
func (r *Reader) SetMaxFrame(maxFrame int) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	r.max = min(maxFrame, MaxFrameLimit)
}

// Next reads and decodes the next frame. See [Reader] for its errors.
func (r *Reader) Next() (Frame, error) {
	if r.err != nil {
		return nil, r.err
	}
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		r.err = err // io.EOF only if no byte of the header arrived
		return nil, err
	}
	n := binary.BigEndian.Uint32(r.hdr[:])
	if uint64(n) > uint64(r.max) {
		r.err = fmt.Errorf("%w: declared length %d, limit %d", ErrFrameTooLarge, n, r.max)
		return nil, r.err
	}
	b, pooled, err := r.read(int(n))
	if pooled != nil {
		defer framePool.Put(pooled) // Decode copies everything it keeps
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		r.err = err
		return nil, err
	}
	if n < 2 {
		return nil, fmt.Errorf("%w: frame length %d, shorter than version and type", ErrMalformed, n)
	}
	if b[0] != FrameVersion {
		return nil, fmt.Errorf("%w: %d", ErrBadVersion, b[0])
	}
	return Decode(Type(b[1]), b[2:])
}

// read reads the next n bytes: into the Reader's small buffer, a pooled buffer (returned as
// pooled, for the caller to put back), or a buffer that grows with the bytes received.
func (r *Reader) read(n int) (b []byte, pooled *[]byte, err error) {
	switch {
	case n <= smallBuf:
		if r.small == nil {
			r.small = make([]byte, smallBuf)
		}
		b = r.small[:n]
		_, err = io.ReadFull(r.r, b)
		return b, nil, err
	case n <= poolBuf:
		pooled = framePool.Get().(*[]byte)
		b = (*pooled)[:n]
		_, err = io.ReadFull(r.r, b)
		return b, pooled, err
	}
	for len(b) < n {
		want := min(n, max(2*len(b), poolBuf))
		if cap(b) < want {
			nb := make([]byte, len(b), want)
			copy(nb, b)
			b = nb
		}
		m, err := io.ReadFull(r.r, b[len(b):want])
		b = b[:len(b)+m]
		if err != nil {
			return nil, nil, err
		}
	}
	return b, nil, nil
}
