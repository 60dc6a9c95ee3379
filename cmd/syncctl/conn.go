package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/syncd-dev/syncd/client"
	"github.com/syncd-dev/syncd/proto"
	"github.com/syncd-dev/syncd/syncd/auth"
)

// defaultDevice is the device id used when neither -device nor the token names one.
const defaultDevice = "cli"

// connFlags are the flags of every command that connects as a device.
type connFlags struct {
	addr        string
	token       string
	device      string
	user        string
	fingerprint string
	dataDir     string
	store       string
	timeout     time.Duration
	verbose     bool
}

func (c *connFlags) register(f *flag.FlagSet, timeoutHelp string) {
	f.StringVar(&c.addr, "addr", "127.0.0.1:7300", "syncd client address (QUIC, host:port); several nodes of a cluster, comma-separated, are tried in turn")
	f.StringVar(&c.token, "token", "", "device token (default $SYNCD_TOKEN; mint one with syncctl token)")
	f.StringVar(&c.device, "device", "", `device id, which must be the token's (default: the device the token names, else "`+defaultDevice+`")`)
	f.StringVar(&c.user, "user", "", "user id, only used to name the default -store (default: the user the token names)")
	f.StringVar(&c.fingerprint, "fingerprint", "", "SHA-256 fingerprint of the server certificate, as syncd logs it (cert_sha256); default: computed from <data-dir>/"+auth.TLSCertFile)
	f.StringVar(&c.dataDir, "data-dir", "", "a local syncd's data directory, to read the certificate fingerprint from (instead of -fingerprint)")
	f.StringVar(&c.store, "store", "", "this device's local SDK store: outbox, synced entries, cursor (default ./syncctl-store/<user>/<device>)")
	if timeoutHelp != "" {
		f.DurationVar(&c.timeout, "timeout", 30*time.Second, timeoutHelp)
	}
	f.BoolVar(&c.verbose, "v", false, "log the SDK's debug messages on stderr")
}

// tokenClaims reads the user and device a token names, without checking its signature (only the
// server can): they only provide defaults. The payload format is stable (auth.MintToken).
func tokenClaims(tok string) (user, device string) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", ""
	}
	var p struct {
		U string `json:"u"`
		D string `json:"d"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return "", ""
	}
	return p.U, p.D
}

// resolve fills the defaults that depend on other flags and the environment. It returns a usage
// error for what is missing.
func (c *connFlags) resolve() error {
	if c.token == "" {
		c.token = strings.TrimSpace(os.Getenv("SYNCD_TOKEN"))
	}
	if c.token == "" {
		return errors.New("no token: pass -token or set SYNCD_TOKEN (mint one with: syncctl token -data-dir <syncd data dir> -user <user> -device <device>)")
	}
	tu, td := tokenClaims(c.token)
	if c.device == "" {
		c.device = td
	}
	if c.device == "" {
		c.device = defaultDevice
	}
	if c.user == "" {
		c.user = tu
	}
	if c.user == "" {
		c.user = defaultDevice
	}
	if !proto.ValidID(c.device) {
		return fmt.Errorf("-device %q is not a valid id (1..%d printable ASCII bytes, no space)", c.device, proto.MaxIDLen)
	}
	if c.store == "" {
		if !safePathElem(c.user) || !safePathElem(c.device) {
			return fmt.Errorf("user %q or device %q cannot name a directory: pass -store", c.user, c.device)
		}
		c.store = filepath.Join("syncctl-store", c.user, c.device)
	}
	if c.fingerprint == "" {
		if c.dataDir == "" {
			return errors.New("no certificate to pin: pass -fingerprint (the cert_sha256 syncd logs at start) or -data-dir (the server's data directory, to read its " + auth.TLSCertFile + ")")
		}
		fp, err := certFingerprint(filepath.Join(c.dataDir, auth.TLSCertFile))
		if err != nil {
			return err
		}
		c.fingerprint = fp
	}
	return nil
}

// safePathElem reports whether id can be used as one directory name.
func safePathElem(id string) bool {
	return id != "." && id != ".." && !strings.ContainsAny(id, `/\:`) && filepath.IsLocal(id)
}

// certFingerprint returns the fingerprint (proto.Fingerprint) of the first certificate in a PEM
// file.
func certFingerprint(path string) (string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the server certificate: %w (is -data-dir the syncd data directory? syncd creates %s on first start; or pass -fingerprint)", err, auth.TLSCertFile)
	}
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			return "", fmt.Errorf("%s holds no PEM CERTIFICATE block; pass -fingerprint", path)
		}
		if b.Type == "CERTIFICATE" {
			return proto.Fingerprint(b.Bytes), nil
		}
	}
}

// dial connects as the device. The caller must Close the client.
func (c *connFlags) dial(ctx context.Context, e *env) (*client.Client, error) {
	level := slog.LevelWarn
	if c.verbose {
		level = slog.LevelDebug
	}
	addrs := strings.Split(c.addr, ",")
	// No ceiling: pull prints every retained entry of the log, however far behind its store is,
	// rather than rebasing past them as an app would (the SDK's default of 10,000).
	return client.Dial(ctx, client.Config{
		Addr: addrs[0], Addrs: addrs[1:], Token: c.token, Device: c.device, Fingerprint: c.fingerprint, StoreDir: c.store,
		Logger:  slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level})),
		Ceiling: -1,
	})
}

// report prints a failed command's error: its protocol code and message when the server refused,
// and what to do.
func (e *env) report(cmd, what string, c *connFlags, err error) {
	var pe *proto.Error
	if errors.As(err, &pe) {
		msg := pe.Message
		if pe.RetryAfterMs > 0 {
			msg += fmt.Sprintf(" (retry after %v)", pe.RetryAfter())
		}
		e.errorf(cmd, "%s: %s: %s", what, proto.CodeOf(err), msg)
	} else {
		e.errorf(cmd, "%s: %v", what, err)
	}
	if hint := hintFor(err, c); hint != "" {
		fmt.Fprintf(e.stderr, "  what to do: %s\n", hint)
	}
}

// hintFor says what to do about err.
func hintFor(err error, c *connFlags) string {
	var pe *proto.Error
	if !errors.As(err, &pe) {
		s := err.Error()
		switch {
		case strings.Contains(s, "fingerprint"):
			return "the server's certificate is not the one pinned: pass the cert_sha256 that syncd logged at start with -fingerprint, or -data-dir of that server"
		case errors.Is(err, context.DeadlineExceeded), strings.Contains(s, "connect to"), strings.Contains(s, "no recent network activity"):
			return fmt.Sprintf("no answer from %s: is syncd running and listening there (UDP)? check -addr", c.addr)
		case errors.Is(err, proto.ErrFrameTooLarge):
			return "the server sent a frame larger than the max_frame it announced (a server bug, or a relay that alters frames): upgrade the server or check what sits between it and you"
		case strings.Contains(s, "lock") || strings.Contains(s, "LOCK"):
			return fmt.Sprintf("the store %s is in use: another syncctl (tail?) runs with this -store; stop it or pass another -store", c.store)
		}
		return ""
	}
	switch pe.Code {
	case proto.CodeUnauthenticated:
		return "the server does not accept this token (malformed; signed with another or a retired key; valid for longer than the server's max_token_lifetime; or its device was revoked — the message says which): mint a new one with syncctl token -data-dir <that server's data dir> -user <user> -device " + c.device + " and pass it with -token or SYNCD_TOKEN"
	case proto.CodeTokenExpired:
		return "mint a new token (syncctl token ... -ttl 24h); the local store (outbox and cursor) carries over"
	case proto.CodeForbidden:
		return "the token names another device than -device " + c.device + ": pass the device the token was minted for (or omit -device)"
	case proto.CodeInvalidArgument:
		return "a field is missing or malformed: ids are 1-" + fmt.Sprint(proto.MaxIDLen) + " printable ASCII bytes without spaces, -msg-id is shard.index.sub as printed by send or pull, -up-to must not pass the conversation's last conv_seq"
	case proto.CodeTooLarge:
		return "shrink the body or the member list (limits are in the server's Welcome; see the protocol docs)"
	case proto.CodeNotMember:
		return "this user is not a member of the conversation: a first message to a direct conversation names the other user with -peer; a group member can add you (syncctl group add)"
	case proto.CodeNoConversation:
		return "the conversation does not exist yet: start a direct one with send -peer <other user>, a group with syncctl group create"
	case proto.CodeConversationExists:
		return "pick another conversation id"
	case proto.CodeNotGroup:
		return "membership changes need a group; this conversation is direct"
	case proto.CodeNoMessage:
		return "check -msg-id: it must be a message of this conversation still retained (see the msg_id printed by send or pull)"
	case proto.CodeNotSender:
		return "only the sender of a message can recall or edit it"
	case proto.CodeRecallWindow:
		return "too late: the server's recall window has passed"
	case proto.CodeAlreadyRecalled:
		return "the message is recalled: it cannot be recalled again, edited or reacted to"
	case proto.CodeConflict:
		return "this client_msg_id was already used with another payload (a client bug): run the command again, which queues it under a new id"
	case proto.CodeRateLimited, proto.CodeOverloaded, proto.CodeUnavailable, proto.CodeTimeout, proto.CodeTooManyConnections:
		return "the server is busy or has no leader for the shard right now; the SDK already retried: try again later and check the node with syncctl status"
	case proto.CodeSuperseded:
		return "another client syncs as this user and device: stop it, or use another -device (with its own token)"
	case proto.CodeUnsupportedVersion:
		return "this syncctl and the server speak different protocol versions: upgrade the older one"
	case proto.CodeInternal:
		return "a server bug or storage failure: see the syncd log; the action may or may not have been applied"
	}
	return "see the syncd log"
}
