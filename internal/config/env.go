// Package config holds the flag-and-environment plumbing every toolfleet binary shares:
// each flag can also be set by an environment variable, flags win, and values are
// validated at start.
package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// EnvName is the environment variable for a flag: prefix + the flag name in upper
// snake case, e.g. ("TOOLFLEET", "nats-port") -> "TOOLFLEET_NATS_PORT".
func EnvName(prefix, flag string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// BindEnv sets every flag of fs that was not given on the command line from its
// environment variable (see EnvName), and appends the variable's name to the flag's
// usage so that --help shows it. Call it after adding flags and before parsing; the
// values are applied by ApplyEnv after parsing. A flag whose usage already names its
// variable (flag groups such as natsconn's add it themselves) is left as it is.
func BindEnv(fs *pflag.FlagSet, prefix string) {
	fs.VisitAll(func(f *pflag.Flag) {
		note := fmt.Sprintf("(env %s)", EnvName(prefix, f.Name))
		if !strings.Contains(f.Usage, note) {
			f.Usage += " " + note
		}
	})
}

// ApplyEnv copies environment values into flags that were not set on the command line.
// A malformed value is an error naming the variable but not its value, which may be a
// secret (a password or token) that must not reach logs.
func ApplyEnv(fs *pflag.FlagSet, prefix string) error {
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || firstErr != nil {
			return
		}
		name := EnvName(prefix, f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			firstErr = fmt.Errorf("environment variable %s: %w", name, unquoteValue(err, v))
		}
	})
	return firstErr
}

// unquoteValue strips the value from pflag's parse error ("invalid argument \"v\" for
// \"--flag\" flag: ..."), keeping the reason.
func unquoteValue(err error, v string) error {
	if v == "" {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), v, "…"))
}
