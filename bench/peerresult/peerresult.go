// Package peerresult is the result format of syncbench's peer load generator (bench/peers): the
// one definition both sides use. The generator is a Go module of its own, so that the etcd and
// Redis clients (gRPC and the rest) never enter syncd's module; it writes one Result per line, as
// a JSON object, on its standard output, and `syncbench -scenario peers` reads them back into its
// table. The package uses the standard library only, so the generator's module can import it
// without taking syncd's dependencies into its build.
package peerresult

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Shape is one of the workload shapes the generator runs against every peer, the same as
// syncbench's own scenarios.
type Shape string

// The shapes, each mirroring a syncbench scenario.
const (
	// Appends: closed-loop writers append values to random logs, each waiting for the durable
	// ack before its next (syncbench's sends). PerSec is acked appends per second; P50/P99 the
	// append→ack latency; Count the appends acked; Errors those that failed.
	Appends Shape = "appends"
	// Push: live subscribers, one per log, while appends arrive at a fixed total rate (syncbench's
	// delivery). P50/P99 are append (issued by the client) → arrival at the subscriber; Count the
	// events received; Errors the appends that failed.
	Push Shape = "push"
	// CatchUp: one log holding a backlog, read from its start in pages (syncbench's catchup).
	// PerSec is entries read per second; Count the entries.
	CatchUp Shape = "catchup"
)

// Result is one line of the generator's output: a shape measured on a system (Failed if it could
// not be), or, with Shape empty, a system not measured at all: Skip says why it was not tried (not
// installed), Failed why it could not be (it did not start).
type Result struct {
	System string        `json:"system"`            // e.g. "etcd 3.4.23, 1 member"
	Nodes  int           `json:"nodes"`             // server processes of the system (members): 1 for Redis
	Shape  Shape         `json:"shape,omitempty"`   // empty for a system not measured
	PerSec float64       `json:"per_sec,omitempty"` // see the shape
	P50    time.Duration `json:"p50_ns,omitempty"`
	P99    time.Duration `json:"p99_ns,omitempty"`
	Count  int           `json:"count,omitempty"`
	Errors int           `json:"errors,omitempty"`
	Note   string        `json:"note,omitempty"`    // how it was measured, for the table's notes
	Failed string        `json:"failed,omitempty"`  // the error that ended this shape, or the system
	Skip   string        `json:"skipped,omitempty"` // why the system was not tried (not installed)
}

// Write writes r as one JSON line.
func Write(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Read reads every line of r as a Result. Empty lines are skipped; a line that is not a Result —
// not a JSON object, no system or node count, an unknown shape, no shape and neither skipped nor failed — is an
// error naming its line number, as is a read error. The Results before the error are returned
// with it.
func Read(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var res Result
		if err := json.Unmarshal(line, &res); err != nil {
			return out, fmt.Errorf("peerresult: line %d: %w", n, err)
		}
		switch {
		case res.System == "":
			return out, fmt.Errorf("peerresult: line %d names no system", n)
		case res.Nodes < 1:
			return out, fmt.Errorf("peerresult: line %d (%s) gives no node count", n, res.System)
		case res.Shape == "" && res.Skip == "" && res.Failed == "":
			return out, fmt.Errorf("peerresult: line %d (%s) has no shape, and says neither why it was skipped nor why it failed", n, res.System)
		case res.Shape != "" && res.Shape != Appends && res.Shape != Push && res.Shape != CatchUp:
			return out, fmt.Errorf("peerresult: line %d (%s): unknown shape %q", n, res.System, res.Shape)
		}
		out = append(out, res)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("peerresult: %w", err)
	}
	return out, nil
}
