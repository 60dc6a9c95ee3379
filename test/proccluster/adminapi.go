package proccluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// ClusterView asks n for the cluster view (GET /v1/cluster).
func (n *Node) ClusterView(ctx context.Context) (adminapi.ClusterView, error) {
	var v adminapi.ClusterView
	code, body, err := n.AdminDo(ctx, http.MethodGet, "/v1/cluster")
	if err != nil {
		return v, err
	}
	if code != http.StatusOK {
		return v, fmt.Errorf("%s GET /v1/cluster: HTTP %d: %s", n.ID, code, body)
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return v, fmt.Errorf("%s GET /v1/cluster: %v", n.ID, err)
	}
	return v, nil
}

// AdminRequest returns a body-less request for path (e.g. "/debug/pprof/profile") to n's admin
// HTTP server, carrying the cluster's admin token.
func (n *Node) AdminRequest(ctx context.Context, method, path string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+n.AdminAddr+path, nil)
	if err != nil {
		return nil, err
	}
	adminapi.Authorize(req, n.c.cred.adminToken)
	return req, nil
}

// AdminDo sends a body-less request for path (e.g. "/v1/cluster") to n's admin HTTP server, with
// the cluster's admin token, and returns the status and the whole body (for any status). Its
// error is the transport's or the body read's.
func (n *Node) AdminDo(ctx context.Context, method, path string) (int, string, error) {
	req, err := n.AdminRequest(ctx, method, path)
	if err != nil {
		return 0, "", err
	}
	resp, err := n.c.http.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
