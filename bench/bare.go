// Package bench is syncd's load generator: the scenarios of the performance targets (acked
// sends, overload, append→delivery, catch-up, idle connections) spoken over the raw protocol
// (proto frames on quic-go streams, no SDK, so the client costs as little as possible), plus
// the bare-QUIC reference every server result is compared with. It knows nothing of the
// server's internals: a Target is an address (or a cluster's addresses), a certificate
// fingerprint and a token minter. The cluster scenarios (CatchUpReplicas, Failover) also drive a
// Cluster, which cmd/syncbench implements with syncd child processes (test/proccluster).
package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/test/testkit"
)

// Bare-QUIC reference shape (issue #3, "Performance"): 8 connections, 64 requests in flight in
// total, 300-byte requests and 48-byte replies as length-prefixed frames pipelined on one
// long-lived stream per connection; bulk: 300-byte frames on one stream.
const (
	bareConns     = 8
	bareInFlight  = 64
	bareReqSize   = 300 // whole frame: 4-byte length + payload
	bareReplySize = 48
	bareBulkFrame = 300
	bareALPN      = "bench"
)

// BareResult is the physical reference measured with quic-go alone.
type BareResult struct {
	ReqPerSec        float64 // pipelined request/replies per second
	BulkMBPerSec     float64 // bulk transfer on one stream, MB/s (10^6 bytes)
	BulkFramesPerSec float64 // the same, in 300-byte frames per second
}

// BareQUIC measures the reference in one process: an echo server on 127.0.0.1:0 and its
// clients, request/reply for d, then bulk transfer for d/2.
func BareQUIC(ctx context.Context, d time.Duration) (BareResult, error) {
	cert, err := testkit.SelfSignedCert("localhost")
	if err != nil {
		return BareResult{}, err
	}
	ln, err := quic.ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert},
		MinVersion: tls.VersionTLS13, NextProtos: []string{bareALPN}}, &quic.Config{MaxIncomingStreams: 16})
	if err != nil {
		return BareResult{}, err
	}
	defer ln.Close()
	srvCtx, stop := context.WithCancel(ctx)
	defer stop()
	var srvWG sync.WaitGroup
	defer srvWG.Wait()
	defer stop()
	bulkBytes, bulkFrames := new(atomic.Int64), new(atomic.Int64)
	bulkDone := make(chan struct{}, 1)
	srvWG.Go(func() {
		for {
			conn, err := ln.Accept(srvCtx)
			if err != nil {
				return
			}
			srvWG.Go(func() {
				defer conn.CloseWithError(0, "")
				for {
					st, err := conn.AcceptStream(srvCtx)
					if err != nil {
						return
					}
					srvWG.Go(func() {
						if bareServeStream(st, bulkBytes, bulkFrames) {
							select {
							case bulkDone <- struct{}{}:
							default:
							}
						}
					})
				}
			})
		}
	})

	// Pinned like every syncd client, so the reference pays the same handshake checks; only the
	// protocol differs (the echo server is not syncd).
	clientTLS := proto.PinnedTLSConfig(proto.Fingerprint(cert.Certificate[0]))
	clientTLS.NextProtos = []string{bareALPN}
	var res BareResult

	// Request/reply: 8 connections, one stream each, 8 in flight per stream.
	conns := make([]*quic.Conn, bareConns)
	for i := range conns {
		if conns[i], err = quic.DialAddr(ctx, ln.Addr().String(), clientTLS, &quic.Config{}); err != nil {
			return res, err
		}
		defer conns[i].CloseWithError(0, "")
	}
	var replies atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	errs := make(chan error, bareConns)
	start := time.Now()
	for _, c := range conns {
		st, err := c.OpenStreamSync(ctx)
		if err != nil {
			return res, err
		}
		wg.Go(func() {
			if err := barePipeline(st, deadline, bareInFlight/bareConns, &replies); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	res.ReqPerSec = float64(replies.Load()) / time.Since(start).Seconds()
	select {
	case err := <-errs:
		return res, fmt.Errorf("bench: bare request/reply: %w", err)
	default:
	}

	// Bulk: one stream, 300-byte frames as fast as possible for d/2.
	st, err := conns[0].OpenStreamSync(ctx)
	if err != nil {
		return res, err
	}
	w := bufio.NewWriterSize(st, 32<<10)
	frame := make([]byte, bareBulkFrame)
	binary.BigEndian.PutUint32(frame, bareBulkFrame-4)
	bulkStart := time.Now()
	bulkEnd := bulkStart.Add(d / 2)
	for i := 0; ; i++ {
		if i%256 == 0 && time.Now().After(bulkEnd) {
			break
		}
		if _, err := w.Write(frame); err != nil {
			return res, fmt.Errorf("bench: bare bulk: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return res, err
	}
	st.Close()
	// The receiver counts; the transfer ends when it has read the whole stream.
	select {
	case <-bulkDone:
	case <-time.After(d + 10*time.Second):
		return res, errors.New("bench: bare bulk: the receiver did not finish")
	}
	el := time.Since(bulkStart).Seconds()
	res.BulkMBPerSec = float64(bulkBytes.Load()) / 1e6 / el
	res.BulkFramesPerSec = float64(bulkFrames.Load()) / el
	return res, nil
}

// bareServeStream answers each request frame (payload starting with 'Q') with a 48-byte reply,
// one Write per reply as a server writing each response frame does, and counts other (bulk)
// frames. It reports whether the stream carried bulk frames and was read to its end.
func bareServeStream(st *quic.Stream, bulkBytes, bulkFrames *atomic.Int64) (bulk bool) {
	defer st.Close()
	r := bufio.NewReaderSize(st, 32<<10)
	reply := make([]byte, bareReplySize)
	binary.BigEndian.PutUint32(reply, bareReplySize-4)
	buf := make([]byte, 64<<10)
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return bulk && errors.Is(err, io.EOF)
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if int(n) > len(buf) {
			st.CancelRead(1)
			return false
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return false
		}
		if n > 0 && buf[0] == 'Q' { // a request: answer it
			if _, err := st.Write(reply); err != nil {
				return false
			}
			continue
		}
		bulk = true
		bulkBytes.Add(int64(n) + 4)
		bulkFrames.Add(1)
	}
}

// barePipeline keeps window requests in flight on st until deadline.
func barePipeline(st *quic.Stream, deadline time.Time, window int, replies *atomic.Int64) error {
	tokens := make(chan struct{}, window)
	done := make(chan error, 1)
	go func() {
		var hdr [4]byte
		buf := make([]byte, 1024)
		for {
			if _, err := io.ReadFull(st, hdr[:]); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				done <- err
				return
			}
			n := binary.BigEndian.Uint32(hdr[:])
			if _, err := io.ReadFull(st, buf[:n]); err != nil {
				done <- err
				return
			}
			if time.Now().Before(deadline) {
				replies.Add(1)
			}
			<-tokens
		}
	}()
	req := make([]byte, bareReqSize)
	binary.BigEndian.PutUint32(req, bareReqSize-4)
	req[4] = 'Q'
	for time.Now().Before(deadline) {
		select {
		case tokens <- struct{}{}:
		case err := <-done:
			return err
		}
		if _, err := st.Write(req); err != nil {
			return err
		}
	}
	st.Close() // the server answers what it got, then closes its side: the reader sees EOF
	return <-done
}
