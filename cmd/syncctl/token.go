package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/syncd-dev/syncd/syncd/auth"
)

func runToken(_ context.Context, e *env, args []string) int {
	const cmd = "token"
	f := newFlagSet(e, cmd, "-user U -device D [-data-dir DIR | -key-file FILE] [-ttl 24h]", `
Mints a device token signed with the server's secret (<data-dir>/token.key, or -key-file) and
prints it. A development and operations convenience: it needs read access to the server's data
directory, which real devices never have (they get tokens from your own auth service, signed
with the same secret). The file is never created here: start syncd once so it creates it.

The token names the user, the device and the key that signed it (its key id, so that servers
holding several keys while one is rotated know which); connect with the same -device (the other
commands default -device to the token's device). Servers refuse tokens valid for longer than
their max_token_lifetime (30 days by default).`, `
syncctl token -data-dir ./syncd-data -user alice -device phone -ttl 24h
syncctl token -key-file /etc/syncd/token-2025.key -user alice -device phone
export SYNCD_TOKEN=$(syncctl token -user alice -device phone)`)
	dataDir := f.String("data-dir", "./syncd-data", "the syncd server's data directory (holds "+auth.TokenKeyFile+")")
	keyFile := f.String("key-file", "", "`file` of the token secret to sign with, as syncd's token_secret_file names it (default: <data-dir>/"+auth.TokenKeyFile+")")
	user := f.String("user", "", "user id the token authenticates (required)")
	device := f.String("device", defaultDevice, "device id the token is for")
	ttl := f.Duration("ttl", 24*time.Hour, "how long the token is valid")
	if code, ok := parse(e, f, args); !ok {
		return code
	}
	if *user == "" {
		e.errorf(cmd, "-user is required (see -h)")
		return exitUsage
	}
	if *ttl < time.Second {
		e.errorf(cmd, "-ttl %v is too short: tokens count whole seconds; use at least 1s", *ttl)
		return exitUsage
	}
	path := filepath.Join(*dataDir, auth.TokenKeyFile)
	if *keyFile != "" {
		path = *keyFile
	}
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) && *keyFile != "" {
			e.errorf(cmd, "-key-file %s does not exist", path)
		} else if errors.Is(err, fs.ErrNotExist) {
			e.errorf(cmd, "%s does not exist: start syncd once so it creates %s, or point -data-dir at its data directory", path, path)
		} else {
			e.errorf(cmd, "%v (is -data-dir the syncd data directory, readable by you?)", err)
		}
		return exitFail
	}
	var secret []byte
	var err error
	if *keyFile != "" {
		secret, err = auth.ReadKeyFile(path)
	} else {
		secret, err = auth.LoadOrCreateSecret(*dataDir) // exists: only reads and checks it
	}
	if err != nil {
		e.errorf(cmd, "%v", err)
		return exitFail
	}
	now := time.Now()
	tok, err := auth.MintToken(secret, auth.TokenClaims{User: *user, Device: *device, Issued: now, Expires: now.Add(*ttl)})
	if err != nil {
		e.errorf(cmd, "%v", err)
		return exitUsage
	}
	fmt.Fprintln(e.stdout, tok)
	return exitOK
}
