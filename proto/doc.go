// Package proto is syncd's wire protocol: the frames a client and a server exchange over QUIC,
// their msgpack encoding, the framing that delimits them on a stream, and the error codes. It is
// the only package the server (syncd) and the Go SDK (client) share, and it imports nothing
// from this module but its own leaf proto/ident (the id rules the storage core applies too). docs/PROTOCOL.md is the specification for implementers in other languages;
// this package is its reference implementation.
//
// # Transport
//
// A client connects over QUIC with TLS 1.3, offering the ALPN "syncd/1" ([ALPN]). It opens one
// bidirectional control stream first and sends [Hello]; the server answers [Welcome] (or an
// [Error] and closes). Then the client opens any number of long-lived request streams, on which
// requests are pipelined and matched to their responses by request id (responses may come out
// of order), and one sync stream per device session, opened by [SyncStart]. The package does not
// open connections; it reads and writes frames on any io.Reader / io.Writer.
//
// # Framing
//
// Every frame on every stream is
//
//	+--------+--------+--------+--------+---------+--------+-------------------------+
//	|        length (u32, big-endian)   | version |  type  |  body (msgpack map)     |
//	+--------+--------+--------+--------+---------+--------+-------------------------+
//	 0                                   4         5        6              4 + length
//
// where length counts version, type and body (so it is at least 2), version is [FrameVersion]
// and type is a [Type]. A receiver refuses a length above its limit ([DefaultMaxFrame] until
// Welcome announces another) without reading the frame, and must then close the stream.
//
// # Bodies
//
// A body is one msgpack map whose keys are the short snake_case names in the struct tags
// (`msgpack:"conv"`). Zero-valued fields are omitted and missing keys decode as zero; unknown
// keys are skipped, so either side may add fields in a later revision. Times are int64 Unix
// nanoseconds, msg_ids the string "shard.index.sub" ([MsgID]), message bodies msgpack bin. The
// encoder options are pinned in codec.go, and every body passes a shape check (check.go) before
// it is decoded, so hostile input costs bounded memory and time.
//
// # Use
//
// Write frames with [WriteFrame] or [AppendFrame]; read them with a [Reader] (one per stream),
// or decode a body with [Decode]. Requests have a Validate method that returns an *[Error] with
// the code to send back; [Error] is both the Error frame and the Go error type, matched with
// errors.Is(err, &Error{Code: c}) or [IsCode]. Frame values are plain structs, owned by the
// caller, not safe for concurrent mutation; the package holds no state besides buffer pools.
//
// Two helpers every client of the protocol needs live here so that there is one copy of each:
// [PinnedTLSConfig] (with [Fingerprint]) builds the client TLS configuration that pins a server
// certificate, and [Pending] matches a request stream's answers to the requests waiting for them.
// [CheckShape] bounds any msgpack value before it is decoded. [Digester] computes the
// reconciliation digest a [Digest] query answers (digest.go), so the server and every Go client
// compute it from one definition.
package proto
