package proto

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

func benchBatch(n int) *Batch {
	b := &Batch{Epoch: 1_700_000_000_000_000_000, Head: 1 << 20}
	for i := 0; i < n; i++ {
		b.Entries = append(b.Entries, Entry{
			Seq: Position(1000 + i), Kind: KindMessage, MsgID: MsgID(fmt.Sprintf("3.%d.0", 5000+i)),
			Conv: "d:alice:bob", ConvSeq: Position(77 + i), Sender: "alice",
			Time: 1_700_000_000_000_000_000 + int64(i), Body: bytes.Repeat([]byte{'x'}, 256),
		})
	}
	return b
}

var benchSend = &Send{ID: 123456, Conv: "d:alice:bob", ClientMsgID: "0b6f3c1e-8d2a-4c8e-9f1a-2b3c4d5e6f70", Body: bytes.Repeat([]byte{'x'}, 256)}

func BenchmarkAppendFrame(b *testing.B) {
	for _, f := range []Frame{benchSend, benchBatch(256)} {
		b.Run(f.FrameType().String(), func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if buf, err = AppendFrame(buf[:0], f); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(buf)))
		})
	}
}

// BenchmarkReader reads frames back; for the batch, entries/s is the catch-up decoding ceiling.
func BenchmarkReader(b *testing.B) {
	for _, f := range []Frame{benchSend, benchBatch(256)} {
		b.Run(f.FrameType().String(), func(b *testing.B) {
			frame, err := AppendFrame(nil, f)
			if err != nil {
				b.Fatal(err)
			}
			src := bytes.NewReader(frame)
			r := NewReader(src, 0)
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				src.Reset(frame)
				if _, err := r.Next(); err != nil && err != io.EOF {
					b.Fatal(err)
				}
			}
			if batch, ok := f.(*Batch); ok {
				b.ReportMetric(float64(len(batch.Entries)*b.N)/b.Elapsed().Seconds(), "entries/s")
			}
		})
	}
}
