package transport

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// FuzzWebSocketRecords feeds arbitrary records to a connection's dispatcher, as a client could
// send them, and reads what the streams it opened deliver: nothing may panic, hang or let a
// stream's buffer grow past its credit; a record that breaks §2.4 stops the connection.
// The input is a sequence of records, each prefixed by its length (uint16, big-endian).
func FuzzWebSocketRecords(f *testing.F) {
	rec := func(id uint32, kind byte, payload ...byte) []byte {
		b := binary.BigEndian.AppendUint16(nil, uint16(5+len(payload)))
		b = binary.BigEndian.AppendUint32(b, id)
		return append(append(b, kind), payload...)
	}
	cat := func(rs ...[]byte) []byte {
		var out []byte
		for _, r := range rs {
			out = append(out, r...)
		}
		return out
	}
	f.Add(cat(rec(1, recData, 0, 0, 0, 5, 1, 2), rec(1, recFin)))
	f.Add(cat(rec(1, recData, 'x'), rec(1, recStop, 0, 0, 0, 9), rec(1, recCredit, 0, 1, 0, 0), rec(2, recData, 'y'), rec(2, recReset, 0, 0, 0, 7)))
	f.Add(cat(rec(1, recData, 'a'), rec(2, recData, 'b'), rec(3, recCredit, 0xff, 0xff, 0xff, 0xff), rec(4, recCredit, 0xff, 0xff, 0xff, 0xff)))
	f.Add(cat(rec(1, recFin), rec(1, recData, 'z')))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newWSConn(nil, nil, 4, func(Stream) {})
		c.sendMsg = func(context.Context, []byte) error { return nil }
		defer c.cancel(nil)
		for len(in) >= 2 {
			n := int(binary.BigEndian.Uint16(in))
			in = in[2:]
			if n > len(in) {
				n = len(in)
			}
			if err := c.dispatch(websocket.MessageBinary, in[:n]); err != nil {
				return // the connection would close with malformed
			}
			in = in[n:]
			for {
				select {
				case st := <-c.accept:
					st.SetReadDeadline(time.Now().Add(time.Millisecond))
					buf := make([]byte, 1<<10)
					st.Read(buf)
					if st.window > wsWindow {
						t.Fatalf("stream %d may receive %d bytes, more than its window", st.id, st.window)
					}
					continue
				default:
				}
				break
			}
		}
	})
}
