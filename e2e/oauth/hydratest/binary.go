package hydratest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// BinaryEnv names a hydra binary to use instead of building one (e.g. a
// packaged Hydra of the same version).
const BinaryEnv = "TOOLFLEET_HYDRA"

// buildTags are Hydra's own release tags: the SQLite driver (cgo) that the
// in-memory DSN needs, without loadable extensions.
const buildTags = "sqlite,sqlite_omit_load_extension"

// buildTimeout bounds a cold build of Hydra (about 5 minutes on 2 busy cores).
const buildTimeout = 20 * time.Minute

// toolModule is the folder of the Go module that pins Hydra as a tool
// (../hydra beside this package): its own module, so that the fleet's
// dependencies never change the versions Hydra is built with.
func toolModule() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("hydratest: cannot locate its own source to find the hydra tool module")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "hydra")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("hydratest: the hydra tool module: %w", err)
	}
	return dir, nil
}

// Binary returns the path of a hydra binary: $TOOLFLEET_HYDRA, else one built
// once from the tool module (go build with Hydra's sqlite tags) into the user
// cache folder, keyed by the module's go.mod and go.sum and the Go version.
// Concurrent test processes wait for one build (a file lock).
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("hydratest: $%s: %w", BinaryEnv, err)
		}
		return p, nil
	}
	mod, err := toolModule()
	if err != nil {
		return "", err
	}
	key, err := buildKey(mod)
	if err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "toolfleet", "hydra", key)
	bin := filepath.Join(dir, "hydra")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("hydratest: cache folder: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil { // another process built it meanwhile
		return bin, nil
	}
	bctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	tmp := bin + ".tmp"
	cmd := exec.CommandContext(bctx, "go", "build", "-tags", buildTags, "-o", tmp, "github.com/ory/hydra/v2")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("hydratest: build hydra (in %s; cgo and a C compiler are needed for its SQLite driver): %w\n%s", mod, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("hydratest: %w", err)
	}
	return bin, nil
}

// buildKey names a build: the tool module's requirements and this Go.
func buildKey(mod string) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(mod, f))
		if err != nil {
			return "", fmt.Errorf("hydratest: %w", err)
		}
		h.Write(b)
	}
	fmt.Fprintf(h, "%s %s/%s %s", runtime.Version(), runtime.GOOS, runtime.GOARCH, buildTags)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// lockFile takes an exclusive lock on path; the returned function releases it.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hydratest: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("hydratest: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
