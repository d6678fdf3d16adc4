package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/toolfleet/toolfleet/internal/portowner"
)

// Before `toolfleet dev` starts anything, it checks what would make it fail
// later with a less helpful message: another dev running in this folder (its
// NATS would wait for a data folder and ports it cannot have), and ports
// another program holds (named when the system says which).

// devPort is a fixed port dev binds and the flag that moves it.
type devPort struct {
	what, flag string
	port       int
}

// checkDevCanStart returns an error saying what to do when another dev runs
// in this folder or a port dev needs is taken.
func checkDevCanStart(cfg devConfig) error {
	if cfg.DevFile != "" {
		// Its process lives and its gateway answers (a pid alone may have been reused).
		if a, err := readDevFile(cfg.DevFile); err == nil && a.PID > 0 && a.PID != os.Getpid() && processAlive(a.PID) && answers(a.Gateway) {
			return fmt.Errorf("another toolfleet dev is running in this folder (pid %d, gateway %s): use it — the other commands find it — "+
				"or stop it first (Ctrl-C where it runs, or kill %d); a second one needs its own --data-dir, --dev-file and ports (0 = any free port)",
				a.PID, a.Gateway, a.PID)
		}
	}
	var taken []string
	for _, p := range []devPort{
		{"the gateway", "--gateway-port", cfg.GatewayPort},
		{"NATS", "--nats-port", cfg.NATSPort},
		{"Temporal", "--temporal-port", cfg.TemporalPort},
		{"the Temporal UI", "--temporal-ui-port", cfg.UIPort},
	} {
		if p.port <= 0 {
			continue // any free port, or none
		}
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(p.port))
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			_ = ln.Close()
			continue
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			taken = append(taken, fmt.Sprintf("port %d (%s) is taken by %s: pass %s N, or %s 0 for any free port", p.port, p.what, holderOf(p.port), p.flag, p.flag))
		} else {
			taken = append(taken, fmt.Sprintf("port %d (%s) cannot be bound (%v): pass %s N, or %s 0 for any free port", p.port, p.what, err, p.flag, p.flag))
		}
	}
	switch len(taken) {
	case 0:
		return nil
	case 1:
		return errors.New(taken[0] + " (another toolfleet dev, in another folder?)")
	}
	return fmt.Errorf("%d ports toolfleet dev needs are taken (another toolfleet dev, in another folder?):\n  %s", len(taken), strings.Join(taken, "\n  "))
}

// holderOf names the process listening on port when the system says
// ("nginx (pid 1234)"), else "another program".
func holderOf(port int) string {
	p, err := portowner.Listener(port)
	if err != nil {
		return "another program"
	}
	if p.Name == "" {
		return fmt.Sprintf("the process with pid %d", p.PID)
	}
	return fmt.Sprintf("%s (pid %d)", p.Name, p.PID)
}

// answers reports whether something accepts connections at addr.
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
