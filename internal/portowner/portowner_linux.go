package portowner

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Bounds of one scan.
const (
	maxProcs      = 8192
	maxFDsPerProc = 65536
	scanBudget    = 500 * time.Millisecond
	maxTableLines = 1 << 20
)

// Listener returns the process listening on TCP port (any local address,
// IPv4 or IPv6), or ErrUnknown.
func Listener(port int) (Process, error) {
	inodes := map[string]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		listeningInodes(table, port, inodes)
	}
	if len(inodes) == 0 {
		return Process{}, ErrUnknown
	}
	deadline := time.Now().Add(scanBudget)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return Process{}, ErrUnknown
	}
	seen := 0
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || !p.IsDir() {
			continue
		}
		if seen++; seen > maxProcs || time.Now().After(deadline) {
			break
		}
		if holds(pid, inodes) {
			return Process{PID: pid, Name: comm(pid)}, nil
		}
	}
	return Process{}, ErrUnknown
}

// listeningInodes adds the inodes of the sockets listening on port in the
// table (the format of /proc/net/tcp: "sl local rem st … uid timeout inode").
func listeningInodes(table string, port int, into map[string]bool) {
	f, err := os.Open(table)
	if err != nil {
		return
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < maxTableLines; n++ {
		fields := strings.Fields(sc.Text())
		const listen = "0A"
		if len(fields) < 10 || fields[3] != listen || !strings.HasSuffix(fields[1], want) {
			continue
		}
		if fields[9] != "0" {
			into[fields[9]] = true
		}
	}
}

// holds reports whether one of pid's descriptors is a socket in inodes.
func holds(pid int, inodes map[string]bool) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	d, err := os.Open(dir)
	if err != nil {
		return false // another user's process, or gone
	}
	defer d.Close()
	names, err := d.Readdirnames(maxFDsPerProc)
	if err != nil {
		return false
	}
	for _, n := range names {
		link, err := os.Readlink(filepath.Join(dir, n))
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			return true
		}
	}
	return false
}

// comm is the command name of pid, "" when unreadable.
func comm(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
