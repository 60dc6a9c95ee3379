package admin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/proto/prototest"
	"github.com/syncd-dev/syncd/raftstore/cluster"
	"github.com/syncd-dev/syncd/syncd"
	"github.com/syncd-dev/syncd/syncd/syncdtest"
	"github.com/syncd-dev/syncd/test/testkit"
)

// The admin endpoints tested through a whole server: real QUIC devices (prototest), real shards,
// fan-out and HTTP.

// testServer is a running server with its routing, to know where users and conversations live.
type testServer struct {
	*syncd.Server
	slots *cluster.Routing
}

func startServer(t *testing.T, tweak func(*syncd.Config)) *testServer {
	t.Helper()
	srv := syncdtest.Start(t, tweak)
	return &testServer{Server: srv, slots: srv.Cluster().Routing()}
}

// connect authenticates uid's device on ts and opens a request stream.
func connect(t *testing.T, ts *testServer, uid, device string) *prototest.Conn {
	t.Helper()
	token, err := ts.MintToken(uid, device, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return prototest.Connect(t, ts.Addr().String(), ts.Fingerprint(), token, uid, device)
}

// scrape returns the body of /metrics at url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	_, body := testkit.HTTP(t, http.MethodGet, url)
	return body
}
