package raftstoretest

import (
	"testing"
	"time"

	"github.com/syncd-dev/syncd/test/testkit"
)

// The two names below moved to testkit. They remain, as forwarders with no logic of their own,
// only for callers in files outside the change that moved them (test/*_test.go other than
// routing and lossy, test/cluster_harness_test.go, cmd/syncctl); delete them once those call
// testkit directly.

// Eventually waits for cond like testkit.WaitTrue.
//
// Deprecated: use testkit.WaitTrue.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitTrue(t, timeout, what, cond)
}

// FreeAddr picks a port like testkit.FreeAddr.
//
// Deprecated: use testkit.FreeAddr.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return testkit.FreeAddr(t)
}
