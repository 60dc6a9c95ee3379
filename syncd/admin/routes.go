package admin

import (
	"net/http"

	"github.com/syncd-dev/syncd/syncd/adminapi"
)

// routes adds the operator endpoints, all under /v1/, to the admin HTTP mux. They read and
// change shard state, so they live on the admin address (loopback by default) and never on the
// client listener. They route keys by the cluster map, so until this node has it (a node that
// is joining, or a new cluster before its first election) they answer 503.
func (s *Server) routes(mux *http.ServeMux) {
	ops := http.NewServeMux()
	s.deadLetterRoutes(ops)
	s.userRoutes(ops)
	s.clusterRoutes(ops)
	s.checkRoutes(ops)
	s.backupRoutes(ops)
	s.inspectRoutes(ops)
	ops.HandleFunc("GET /v1/webtransport/certs", func(w http.ResponseWriter, r *http.Request) {
		certs := []adminapi.BrowserCert{}
		if s.browserCerts != nil {
			certs = append(certs, s.browserCerts()...)
		}
		writeJSON(w, http.StatusOK, adminapi.BrowserCerts{Certs: certs})
	})
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		if s.cluster.SlotTable() == nil {
			writeOpsError(w, http.StatusServiceUnavailable, "unavailable", "this node does not have the cluster map yet",
				"retry in a few seconds; if this lasts, check that the node can reach the cluster (its -join address or -peers)")
			return
		}
		ops.ServeHTTP(w, r)
	})
}
