package proto

// Hello is the first frame of a connection, on its first (control) stream, and must arrive
// within the server's Hello deadline (a few seconds). The server answers with Welcome, or with
// an Error (CodeUnauthenticated, CodeTokenExpired, CodeForbidden, CodeUnsupportedVersion,
// CodeOverloaded or CodeTooManyConnections with retry_after_ms, CodeTimeout when no Hello
// came in time) and closes the connection with the same code and a reason phrase that carries
// the retry hint ([CloseReason]), since the Error frame itself may be lost in the close.
type Hello struct {
	Token         string `msgpack:"token"`          // signed token naming user, device, expiry
	Device        string `msgpack:"device"`         // this device's id; must match the token's
	ClientVersion string `msgpack:"client_version"` // e.g. "syncd-go/0.1.0", for logs
	ProtoVersion  uint32 `msgpack:"proto_version"`  // the client's revision, ProtoVersion
}

// FrameType implements Frame.
func (*Hello) FrameType() Type { return TypeHello }

// Validate checks the fields: a token (CodeUnauthenticated if empty, CodeTooLarge beyond
// MaxTokenLen), a valid device id, a client version of at most MaxClientVersionLen printable
// ASCII bytes (may be empty), and a proto_version of at least 1 (CodeUnsupportedVersion).
func (h *Hello) Validate() error {
	switch {
	case h.Token == "":
		return Errorf(CodeUnauthenticated, "no token")
	case len(h.Token) > MaxTokenLen:
		return Errorf(CodeTooLarge, "token of %d bytes, at most %d", len(h.Token), MaxTokenLen)
	case h.ProtoVersion == 0:
		return Errorf(CodeUnsupportedVersion, "proto_version 0: the first revision is 1")
	case len(h.ClientVersion) > MaxClientVersionLen:
		return Errorf(CodeTooLarge, "client_version of %d bytes, at most %d", len(h.ClientVersion), MaxClientVersionLen)
	}
	for i := 0; i < len(h.ClientVersion); i++ {
		if c := h.ClientVersion[i]; c < ' ' || c > '~' {
			return invalid("client_version %s is not printable ASCII", quote(h.ClientVersion))
		}
	}
	return checkID("device id", h.Device)
}

// Welcome accepts a Hello. After it the client may open request and sync streams; the control
// stream stays open for the life of the connection (closing it ends the session). On it the
// client may send Refresh (answered by Refreshed or an Error) and Report (answered only when
// refused); the server sends an Error before it closes the connection (CodeTokenExpired when
// the token expires, CodeUnauthenticated when an operator revokes the device, CodeUnavailable
// when the node shuts down or leaves the cluster).
type Welcome struct {
	User         string `msgpack:"user"`          // the authenticated user
	Device       string `msgpack:"device"`        // the device, as in Hello
	ServerTime   int64  `msgpack:"server_time"`   // server clock, Unix nanoseconds
	Session      string `msgpack:"session"`       // opaque id of this connection, for logs and support
	ProtoVersion uint32 `msgpack:"proto_version"` // revision used on this connection: min(client's, server's)
	Limits       Limits `msgpack:"limits"`        // the connection's limits
	// TokenExpires is when the token of Hello expires, Unix nanoseconds (a whole second): the
	// server closes the connection with CodeTokenExpired then, unless a Refresh presented a newer
	// token before. Clients need not parse tokens to know it.
	TokenExpires int64 `msgpack:"token_expires"`
}

// FrameType implements Frame.
func (*Welcome) FrameType() Type { return TypeWelcome }

// Refresh presents a new token for the connection's device on the control stream, after Welcome,
// so that a session outlives its first token without reconnecting. The token must name the same
// user and device as the connection's (else CodeForbidden) and pass the checks of Hello's token
// (CodeUnauthenticated, CodeTokenExpired). The server answers Refreshed, or an Error after which
// the session goes on under the token it had (and ends when that one expires). Send one at a
// time: the answers carry no request id.
type Refresh struct {
	Token string `msgpack:"token"` // the new token
}

// FrameType implements Frame.
func (*Refresh) FrameType() Type { return TypeRefresh }

// Validate checks the token as Hello.Validate does: present (CodeUnauthenticated) and at most
// MaxTokenLen bytes (CodeTooLarge).
func (r *Refresh) Validate() error {
	switch {
	case r.Token == "":
		return Errorf(CodeUnauthenticated, "no token")
	case len(r.Token) > MaxTokenLen:
		return Errorf(CodeTooLarge, "token of %d bytes, at most %d", len(r.Token), MaxTokenLen)
	}
	return nil
}

// Refreshed accepts a Refresh: the connection now runs under the new token.
type Refreshed struct {
	// TokenExpires is when the new token expires, Unix nanoseconds: the connection's new end
	// unless another Refresh comes first.
	TokenExpires int64 `msgpack:"token_expires"`
}

// FrameType implements Frame.
func (*Refreshed) FrameType() Type { return TypeRefreshed }

// Limits are the server's limits for one connection, announced in Welcome. A zero field means
// the protocol default given for it.
type Limits struct {
	// MaxFrame is the largest frame (length field value) either side may send on this
	// connection, between 128 KiB and MaxFrameLimit. Default DefaultMaxFrame.
	MaxFrame uint32 `msgpack:"max_frame"`
	// MaxBody is the largest message body. Default MaxBody; never more than MaxBody.
	MaxBody uint32 `msgpack:"max_body"`
	// MaxBatch caps entries per Batch and per page of History and ConvList. Default
	// DefaultMaxBatch, at most MaxPage.
	MaxBatch uint32 `msgpack:"max_batch"`
	// SendRatePerS is the sustained number of mutations per second this device may send before
	// getting CodeRateLimited. 0 means no limit announced.
	SendRatePerS uint32 `msgpack:"send_rate_per_s"`
	// HeartbeatMs is the interval of Heartbeat frames on an idle sync stream. Default
	// DefaultHeartbeatMs.
	HeartbeatMs uint32 `msgpack:"heartbeat_ms"`
	// MaxStreams is the most bidirectional streams the client may have open at once on this
	// connection, the control stream included; QUIC's stream limit enforces it (opening one
	// more waits until one closes). 0 means not announced.
	MaxStreams uint32 `msgpack:"max_streams"`
	// SendBurst is how many mutations this device may send at once, on top of SendRatePerS,
	// before getting CodeRateLimited: the rate limit is a token bucket of this size, shared by
	// all of the device's connections. 0 means not announced.
	SendBurst uint32 `msgpack:"send_burst"`
	// QueryRatePerS and QueryBurst are the same token bucket for queries (ConvList, ConvState,
	// History, Members, HeadCheck), kept apart from mutations. 0 means not announced.
	QueryRatePerS uint32 `msgpack:"query_rate_per_s"`
	QueryBurst    uint32 `msgpack:"query_burst"`
	// RequestIdleMs is how long a request stream may go without a frame from the client before
	// the server closes it (after answering the requests it received). 0 means not announced.
	RequestIdleMs uint32 `msgpack:"request_idle_ms"`
}

// Defaults of the Limits fields that have one.
const (
	DefaultMaxBatch    = 256
	DefaultHeartbeatMs = 15000
)

// WithDefaults returns l with every zero field set to its default and MaxFrame, MaxBody and
// MaxBatch lowered to the protocol's caps (MaxFrameLimit, MaxBody, MaxPage). The fields without
// a default (SendRatePerS, SendBurst, QueryRatePerS, QueryBurst, MaxStreams, RequestIdleMs) stay
// 0: not announced.
func (l Limits) WithDefaults() Limits {
	def := func(v *uint32, d, max uint32) {
		if *v == 0 {
			*v = d
		}
		*v = min(*v, max)
	}
	def(&l.MaxFrame, DefaultMaxFrame, MaxFrameLimit)
	def(&l.MaxBody, MaxBody, MaxBody)
	def(&l.MaxBatch, DefaultMaxBatch, MaxPage)
	def(&l.HeartbeatMs, DefaultHeartbeatMs, ^uint32(0))
	return l
}
