package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/toolfleet/toolfleet/internal/config"
)

// defaultDevFile is where `toolfleet dev` writes its addresses and the other
// commands look for them, relative to the working folder.
const defaultDevFile = ".toolfleet/dev.json"

// devFileEnv names another file for both (e.g. to find a dev started in
// another folder).
const devFileEnv = "TOOLFLEET_DEV_FILE"

// maxDevFile bounds what the CLI reads of a dev file.
const maxDevFile = 64 << 10

// devAddresses is what `toolfleet dev` writes to its dev file while it runs.
// It holds no secret: with --gateway-jwt-secret the CLI still needs --token.
type devAddresses struct {
	// PID is the dev process; a file whose process is gone is ignored.
	PID int `json:"pid"`
	// Gateway is the gateway's host:port (gRPC, Connect, gRPC-Web, OXP HTTP).
	Gateway string `json:"gateway"`
	// GatewayURL is the same as an HTTP base URL.
	GatewayURL string `json:"gateway_url"`
	// Auth says the gateway wants bearer tokens (--token).
	Auth       bool   `json:"auth"`
	NATS       string `json:"nats"`
	Temporal   string `json:"temporal"`
	TemporalUI string `json:"temporal_ui,omitempty"`
	Namespace  string `json:"namespace"`
}

// writeDevFile writes a (0600, replaced atomically) and returns a function
// that removes it again unless another dev process has written it since.
func writeDevFile(path string, a devAddresses) (remove func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("dev file: %w", err)
	}
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dev file: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dev-*.json")
	if err != nil {
		return nil, fmt.Errorf("dev file: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return nil, fmt.Errorf("dev file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return nil, fmt.Errorf("dev file: %w", err)
	}
	return func() {
		if cur, err := readDevFile(path); err == nil && cur.PID == a.PID {
			_ = os.Remove(path)
		}
	}, nil
}

// readDevFile reads a dev file as written by writeDevFile.
func readDevFile(path string) (devAddresses, error) {
	var a devAddresses
	f, err := os.Open(path)
	if err != nil {
		return a, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDevFile+1))
	if err != nil {
		return a, err
	}
	if len(b) > maxDevFile {
		return a, fmt.Errorf("%s: over %d bytes", path, maxDevFile)
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return a, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// devFilePath is the dev file the CLI reads: $TOOLFLEET_DEV_FILE or
// .toolfleet/dev.json in the working folder.
func devFilePath() string {
	if p := os.Getenv(devFileEnv); p != "" {
		return p
	}
	return defaultDevFile
}

// runningDev returns the addresses of the `toolfleet dev` that wrote the dev
// file, if that process still runs.
func runningDev() (devAddresses, bool) {
	a, err := readDevFile(devFilePath())
	if err != nil || a.PID <= 0 || a.Gateway == "" || !processAlive(a.PID) {
		return devAddresses{}, false
	}
	return a, true
}

// processAlive reports whether a process with pid exists (signal 0 checks
// without sending anything; EPERM means it exists as another user's).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// applyEnvAndDev sets fs's flags from TOOLFLEET_* variables and then, when
// neither a flag nor a variable named the gateway, points --gateway at a
// running `toolfleet dev` (its dev file).
func applyEnvAndDev(fs *pflag.FlagSet) error {
	if err := config.ApplyEnv(fs, "TOOLFLEET"); err != nil {
		return err
	}
	f := fs.Lookup("gateway")
	if f == nil || f.Changed {
		return nil
	}
	if a, ok := runningDev(); ok {
		return fs.Set("gateway", a.Gateway)
	}
	return nil
}

// gatewayFlagHelp is the help text of every --gateway flag.
const gatewayFlagHelp = "gateway address host:port; when not given, that of the toolfleet dev running in this folder (" + defaultDevFile + ", or $" + devFileEnv + ")"
