package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/syncd-dev/syncd/test/testkit"
)

// TestConformanceCommand runs `syncd conformance` and lists its scenarios through the control API
// it announces; test/conformance_test.go plays the runs.
func TestConformanceCommand(t *testing.T) {
	control := testkit.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr testkit.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"conformance", "-listen", testkit.FreeAddr(t), "-control", control, "-web", testkit.FreeAddr(t)}, &stdout, &stderr)
	}()
	testkit.WaitTrue(t, 30*time.Second, "the kit to announce itself", func() bool {
		return strings.Contains(stdout.String(), "drivers use http://"+control)
	})
	res, err := http.Get("http://" + control + "/v1/scenarios")
	if err != nil {
		t.Fatal(err)
	}
	var list []struct{ Name string }
	err = json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if err != nil || len(list) < 12 || list[0].Name != "gap" {
		t.Errorf("GET /v1/scenarios: %v, %v", list, err)
	}
	cancel()
	if rc := <-done; rc != 0 {
		t.Errorf("exit status %d; stderr:\n%s", rc, stderr.String())
	}
	if rc := run(context.Background(), []string{"conformance", "-log-level", "loud"}, &stdout, &stderr); rc != 2 ||
		!strings.Contains(stderr.String(), `-log-level "loud" must be`) {
		t.Errorf("a bad flag: exit %d, stderr %q", rc, stderr.String())
	}
}
