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
	f := newFlagSet(e, cmd, "-user U -device D [-data-dir DIR] [-ttl 24h]", `
Mints a device token signed with the server's secret (<data-dir>/token.key) and prints it.
A development and operations convenience: it needs read access to the server's data directory,
which real devices never have (they get tokens from your own auth service, signed with the same
secret). The file is never created here: start syncd once so it creates it.

The token names the user and the device; connect with the same -device (the other commands
default -device to the token's device).`, `
syncctl token -data-dir ./syncd-data -user alice -device phone -ttl 24h
export SYNCD_TOKEN=$(syncctl token -user alice -device phone)`)
	dataDir := f.String("data-dir", "./syncd-data", "the syncd server's data directory (holds "+auth.TokenKeyFile+")")
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
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			e.errorf(cmd, "%s does not exist: start syncd once so it creates %s, or point -data-dir at its data directory", path, path)
		} else {
			e.errorf(cmd, "%v (is -data-dir the syncd data directory, readable by you?)", err)
		}
		return exitFail
	}
	secret, err := auth.LoadOrCreateSecret(*dataDir) // exists: only reads and checks it
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
