package proccluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModulePath is the module whose commands Build compiles.
const ModulePath = "github.com/syncd-dev/syncd"

// NotInModuleError is the error of ModuleRoot, and so of Build, when the directory is not inside
// the syncd module. Why says what was found instead, for a caller that explains what to do
// (localcluster suggests -syncd).
type NotInModuleError struct {
	Why string // e.g. "/x/go.mod is module \"example.com/x\", not github.com/syncd-dev/syncd"
}

// Error says that the directory is not inside the syncd module, and why.
func (e *NotInModuleError) Error() string {
	return "proccluster: not inside the syncd module: " + e.Why
}

// BuildConfig says what Build compiles and where.
type BuildConfig struct {
	// Dir receives the binaries (syncd, syncctl). Required; created if missing.
	Dir string
	// Root is a directory inside the syncd module to build from. Default: the current directory.
	Root string
	// Syncctl also builds cmd/syncctl. Default false.
	Syncctl bool
}

// Binaries are the paths of the commands Build compiled.
type Binaries struct {
	Syncd   string // cmd/syncd
	Syncctl string // cmd/syncctl; "" if not built
}

// Build compiles cmd/syncd (and cmd/syncctl if cfg.Syncctl) of the module holding cfg.Root into
// cfg.Dir with one `go build`, the go command found in PATH. Its error is a *NotInModuleError
// when cfg.Root is not inside the syncd module, and carries the compiler's output when the build
// fails.
func Build(ctx context.Context, cfg BuildConfig) (Binaries, error) {
	if cfg.Dir == "" {
		return Binaries{}, errors.New("proccluster: BuildConfig.Dir is required")
	}
	from := cfg.Root
	if from == "" {
		wd, err := os.Getwd()
		if err != nil {
			return Binaries{}, err
		}
		from = wd
	}
	root, err := ModuleRoot(from)
	if err != nil {
		return Binaries{}, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return Binaries{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	pkgs := []string{"./cmd/syncd"}
	bins := Binaries{Syncd: filepath.Join(dir, "syncd")}
	if cfg.Syncctl {
		pkgs = append(pkgs, "./cmd/syncctl")
		bins.Syncctl = filepath.Join(dir, "syncctl")
	}
	// A trailing separator makes go build write every named command into the directory.
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("proccluster: go build %s in %s: %w\n%s", strings.Join(pkgs, " "), root, err, out)
	}
	return bins, nil
}

// ModuleRoot walks up from dir to the go.mod of the syncd module (ModulePath) and returns its
// directory. Its error is a *NotInModuleError saying which go.mod it found instead, or that there
// was none.
func ModuleRoot(dir string) (string, error) {
	for d := dir; ; {
		f, err := os.Open(filepath.Join(d, "go.mod"))
		if err == nil {
			mod := ""
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					mod = strings.Trim(strings.TrimSpace(rest), `"`)
					break
				}
			}
			f.Close()
			if mod != ModulePath {
				return "", &NotInModuleError{Why: fmt.Sprintf("%s is module %q, not %s", filepath.Join(d, "go.mod"), mod, ModulePath)}
			}
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", &NotInModuleError{Why: "no go.mod in " + dir + " or above"}
		}
		d = parent
	}
}
