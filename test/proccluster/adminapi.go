package proccluster

// The one file that names syncd's JSON admin types; when they move to their own light package,
// the import below is the only line to change.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	adminapi "github.com/syncd-dev/syncd/syncd"
)

// ClusterView is the body of GET /v1/cluster: the nodes, shards, leaders and replica indexes as
// the answering node sees the whole cluster.
type ClusterView = adminapi.ClusterView

// ClusterView asks n for the cluster view (GET /v1/cluster).
func (n *Node) ClusterView(ctx context.Context) (ClusterView, error) {
	var v ClusterView
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
