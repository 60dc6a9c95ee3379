package syncd

import "net/http"

// opsRoutes adds the operator endpoints to the admin HTTP mux. They read and change shard state,
// so they live on the admin address (loopback by default) and never on the client listener.
func (s *Server) opsRoutes(mux *http.ServeMux) {
	s.deadLetterRoutes(mux)
	s.userRoutes(mux)
	s.clusterRoutes(mux)
	s.inspectRoutes(mux)
}
