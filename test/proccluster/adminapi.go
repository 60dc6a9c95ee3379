package proccluster

import (
	"context"
	"encoding/json"
	"fmt"
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
