package test

import (
	"bytes"
	"debug/elf"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/syncd-dev/syncd/test/proccluster"
	"github.com/syncd-dev/syncd/test/testkit"
)

// composeFile is the three-node compose file the project ships.
const composeFile = "../cmd/syncd/deploy/compose.yaml"

// composeService is what the test reads of a compose service.
type composeService struct {
	Entrypoint  []string          `yaml:"entrypoint"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
}

// TestComposeCluster runs the shipped compose file's services as processes, the way Docker would
// run them but without Docker (this project's CI reaches no container registry): each named
// volume is a directory, each container's mounts are links in a root of its own, each container's
// address is a loopback address of its own (n1 127.0.0.1, n2 .2, n3 .3, which is what the
// compose network's names resolve to). The certs service runs twice (every `up` runs it again:
// it must keep what exists), then the three nodes start from their environment alone, form one
// cluster with every shard led, and each stops with exit status 0 on SIGTERM. It also builds the
// binaries as the Dockerfile does and checks they are static (the image has no libc).
func TestComposeCluster(t *testing.T) {
	skipShort(t)
	raw, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]composeService `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	bin := dockerBuild(t)
	dir := t.TempDir()
	volumes := map[string]string{}
	for name := range compose.Volumes {
		volumes[name] = filepath.Join(dir, "volumes", name)
		if err := os.MkdirAll(volumes[name], 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// root makes a container's file system view: its mounts as links under a root of its own.
	root := func(service string, s composeService) string {
		r := filepath.Join(dir, "roots", service)
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			host, ok := volumes[parts[0]]
			if !ok {
				t.Fatalf("service %s mounts %q, not a named volume of the file", service, v)
			}
			at := filepath.Join(r, parts[1])
			if err := os.MkdirAll(filepath.Dir(at), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(host, at); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	inRoot := func(r, s string) string {
		return regexp.MustCompile(`(^|[=,])(/(cluster|data)\b)`).ReplaceAllString(s, "${1}"+r+"${2}")
	}

	certs := compose.Services["certs"]
	if len(certs.Entrypoint) < 2 || certs.Entrypoint[0] != "/usr/local/bin/syncctl" {
		t.Fatalf("the certs service's entrypoint: %q", certs.Entrypoint)
	}
	certsRoot := root("certs", certs)
	for range 2 {
		var args []string
		for _, a := range certs.Entrypoint[1:] {
			args = append(args, inRoot(certsRoot, a))
		}
		if out, err := exec.Command(filepath.Join(bin, "syncctl"), args...).CombinedOutput(); err != nil {
			t.Fatalf("the certs service: %v\n%s", err, out)
		}
	}

	// The nodes, their container ports mapped to free ports of their own loopback address.
	ports := map[string]string{} // "n1:7400" → "127.0.0.1:NNNNN"
	addr := func(node, port string) string {
		k := node + ":" + port
		if ports[k] == "" {
			i := int(node[1] - '1')
			ports[k] = proccluster.NodeIP(i) + ":" + strings.Split(testkit.FreeAddr(t), ":")[1]
		}
		return ports[k]
	}
	type proc struct {
		id, admin string
		cmd       *exec.Cmd
		log       bytes.Buffer
		done      chan error
	}
	var procs []*proc
	for _, id := range []string{"n1", "n2", "n3"} {
		s, ok := compose.Services[id]
		if !ok {
			t.Fatalf("no service %s", id)
		}
		r := root(id, s)
		p := &proc{id: id, done: make(chan error, 1)}
		env := []string{}
		for k, v := range s.Environment {
			v = inRoot(r, v)
			v = regexp.MustCompile(`0\.0\.0\.0:(\d+)`).ReplaceAllStringFunc(v, func(m string) string { return addr(id, m[len("0.0.0.0:"):]) })
			v = regexp.MustCompile(`\b(n[123]):(\d+)`).ReplaceAllStringFunc(v, func(m string) string {
				node, port, _ := strings.Cut(m, ":")
				return addr(node, port)
			})
			if k == "SYNCD_ADMIN" {
				p.admin = v
			}
			env = append(env, k+"="+v)
		}
		p.cmd = exec.Command(filepath.Join(bin, "syncd"))
		p.cmd.Env = append(env, "PATH="+os.Getenv("PATH"), "SYNCD_LOG_LEVEL=warn")
		p.cmd.Stdout, p.cmd.Stderr = &p.log, &p.log
		procs = append(procs, p)
	}
	for _, p := range procs {
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.done <- p.cmd.Wait() }()
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
			if t.Failed() {
				t.Logf("%s's log:\n%s", p.id, p.log.String())
			}
		}
	})
	token, err := os.ReadFile(filepath.Join(volumes["shared"], "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		testkit.WaitTrue(t, 90*time.Second, p.id+" ready, in a cluster whose every shard has a leader", func() bool {
			req, _ := http.NewRequest(http.MethodGet, "http://"+p.admin+"/readyz", nil)
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
	}
	for _, p := range procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range procs {
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("%s exited with %v on SIGTERM, want 0:\n%s", p.id, err, p.log.String())
			}
		case <-time.After(60 * time.Second): // the services' stop_grace_period
			t.Errorf("%s did not stop within 60 s of SIGTERM", p.id)
		}
	}
}

// dockerBuild builds syncd and syncctl as the Dockerfile's build stage does (its go build line,
// run here) into a directory it returns, and checks both are static executables, which the
// image's distroless base (no libc) needs.
func dockerBuild(t *testing.T) string {
	t.Helper()
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`RUN (CGO_ENABLED=0 go build [^\n]*(?:\\\n[^\n]*)*?) \\\n \&\&`).FindSubmatch(df)
	if m == nil {
		t.Fatal("the Dockerfile has no `RUN CGO_ENABLED=0 go build … \\ && …` line")
	}
	line := strings.ReplaceAll(string(m[1]), "\\\n", " ")
	out := t.TempDir()
	line = strings.ReplaceAll(line, "-o /out/", "-o "+out+"/")
	line = strings.ReplaceAll(line, "${VERSION}", "v0.0.0-compose-test")
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the Dockerfile's build: %s: %v\n%s", line, err, b)
	}
	for _, name := range []string{"syncd", "syncctl"} {
		f, err := elf.Open(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked: the distroless image has no libc", name)
			}
		}
		f.Close()
	}
	if b, err := exec.Command(filepath.Join(out, "syncd"), "-version").Output(); err != nil || !strings.HasPrefix(string(b), "syncd v0.0.0-compose-test ") {
		t.Errorf("the built syncd -version: %q, %v", b, err)
	}
	return out
}
