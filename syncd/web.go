package syncd

import (
	"crypto/tls"
	"fmt"

	"github.com/syncd-dev/syncd/syncd/adminapi"
	"github.com/syncd-dev/syncd/syncd/transport"
)

// Browsers (PROTOCOL §2.3, §2.4): the same sessions as over syncd/1, carried by WebTransport or
// by a WebSocket, on Config.WebAddr. Only the listener and the certificates are the web's own;
// what a session does is admission.go's and session.go's, whatever carries it.

// listenWeb binds the browsers' listeners Config asks for. With a CA-issued certificate
// (CertFile) both serve it; without one, WebTransport serves the short-lived certificates pages
// pin (auth.BrowserCerts) and a WebSocket off loopback serves the self-signed one, which
// browsers refuse (they pin nothing for WebSocket): logged, since such a node needs a real
// certificate for its fallback.
func (s *Server) listenWeb(cert tls.Certificate) error {
	cfg := s.cfg
	if !cfg.servesWebTransport() && !cfg.servesWebSocket() {
		return nil
	}
	origins, err := transport.ParseOrigins(cfg.AllowedOrigins)
	if err != nil {
		return err
	}
	wc := transport.WebConfig{Addr: cfg.WebAddr, WebSocket: cfg.servesWebSocket(), Origins: origins,
		MaxStreams: cfg.MaxStreamsPerConn, Logger: s.logger, Refused: s.metrics.webRefusal,
		VerifySourceAddress: func() bool { return len(s.handshakes) >= max(cap(s.handshakes)/2, 1) }}
	if cfg.servesWebTransport() {
		wc.WebTransportTLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}}
		if s.webCerts != nil {
			wc.WebTransportTLS = &tls.Config{MinVersion: tls.VersionTLS13, GetCertificate: s.webCerts.GetCertificate}
		}
	}
	if wc.WebSocket && !loopback(cfg.WebAddr) {
		wc.WebSocketTLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		if cfg.CertFile == "" {
			s.logger.Warn("websocket: serving the self-signed certificate, which browsers refuse for WebSocket: "+
				"give the node a certificate they trust (cert_file, key_file) for browsers that cannot use WebTransport",
				"addr", cfg.WebAddr)
		}
	}
	if s.web, err = transport.ListenWeb(wc); err != nil {
		return fmt.Errorf("syncd: listen for browsers on %s (pick another -web-listen, or -web-listen off): %w", cfg.WebAddr, err)
	}
	return nil
}

// WebAddrs returns the addresses browsers connect to, WebTransport (UDP) and WebSocket (TCP),
// "" for one that is off.
func (s *Server) WebAddrs() (webTransport, webSocket string) {
	if s.web == nil {
		return "", ""
	}
	if a := s.web.UDPAddr(); a != nil {
		webTransport = a.String()
	}
	if a := s.web.TCPAddr(); a != nil {
		webSocket = a.String()
	}
	return webTransport, webSocket
}

// WebSocketPlain reports whether the WebSocket listener serves plain ws:// (a loopback address).
func (s *Server) WebSocketPlain() bool { return loopback(s.cfg.WebAddr) }

// BrowserCerts returns the certificates pages pin to reach this node over WebTransport, the one
// served now first; none when the node has a CA-issued certificate, which browsers trust.
func (s *Server) BrowserCerts() []adminapi.BrowserCert {
	if s.webCerts == nil {
		return nil
	}
	return s.webCerts.Published()
}

// servesWebTransport and servesWebSocket say whether the node serves browsers that way.
func (c Config) servesWebTransport() bool { return c.WebAddr != WebOff && !c.DisableWebTransport }

func (c Config) servesWebSocket() bool { return c.WebAddr != WebOff && !c.DisableWebSocket }
