package main

import (
	"strings"
	"testing"
)

const benchOutput = `goos: linux
pkg: github.com/toolfleet/toolfleet/bench
BenchmarkGatewayCall/callers=1-2    	    5000	    512345 ns/op	 0.2100 throughput-ratio	 0.7500 call-id÷bare-hop	 12345 gateway-calls/s
BenchmarkGatewayCall/callers=64-2   	    5000	    212345 ns/op	 0.2500 throughput-ratio	 0.8100 call-id÷bare-hop
    gateway_test.go:120: callers=64 n=5000 direct ...
BenchmarkCodeMode   	      10	 183371606 ns/op	 11.00 loop-round-trips	 2.000 program-round-trips	 1.170 program/loop-x
PASS
`

func TestParseBenchAndTable(t *testing.T) {
	rows := parseBench(benchOutput)
	if len(rows) != 3 || rows[0].name != "GatewayCall/callers=1" || rows[2].name != "CodeMode" {
		t.Fatalf("rows = %+v", rows)
	}
	got := table(rows[:2])
	want := `| | GatewayCall/callers=1 | GatewayCall/callers=64 |
|---|---|---|
| throughput-ratio | 0.210 | 0.250 |
| call-id÷bare-hop | 0.750 | 0.810 |
| gateway-calls/s | 12345 |  |
`
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	if got := formatValue(1.17); got != "1.17" {
		t.Errorf("formatValue(1.17) = %q", got)
	}
}

func TestParseLog(t *testing.T) {
	out := `=== RUN   TestHistoryStaysSmall
    e2e_test.go:344: 101 turns, tool results of 51200 bytes: history 162126 bytes in 727 events (1605 bytes/turn); transcript 5200000 bytes; a transcript-in-history design would record at least 264000000 bytes
--- PASS: TestHistoryStaysSmall (40.1s)
`
	rows := parseLog(out, historyMetrics)
	if len(rows) != 1 || rows[0].name != "TestHistoryStaysSmall" || len(rows[0].metrics) != len(historyMetrics) {
		t.Fatalf("rows = %+v", rows)
	}
	if m := rows[0].metrics[2]; m.unit != "history-B" || m.value != 162126 {
		t.Errorf("history metric = %+v", m)
	}
	// A changed log line yields nothing rather than wrong figures.
	if rows := parseLog(strings.Replace(out, "events", "records", 1), historyMetrics); rows != nil {
		t.Errorf("parsed a line it does not know: %+v", rows)
	}
}

func TestReplaceBlock(t *testing.T) {
	doc := "# Perf\n<!-- bench:a -->\nold\n<!-- /bench:a -->\nkept\n"
	got, err := replaceBlock(doc, "a", "new\n")
	if err != nil || got != "# Perf\n<!-- bench:a -->\nnew\n<!-- /bench:a -->\nkept\n" {
		t.Fatalf("replaceBlock = %q, %v", got, err)
	}
	if _, err := replaceBlock(doc, "b", "x"); err == nil || !strings.Contains(err.Error(), "<!-- bench:b -->") {
		t.Fatalf("a missing block: %v", err)
	}
}

func TestCommandQuotes(t *testing.T) {
	s := suite{pkg: "./bench", bench: "CodeMode", time: "10x", timeout: 600e9, env: []string{"A=1"}}
	if got, want := s.command(), "A=1 go test ./bench -count=1 -timeout 10m0s -run '^$' -bench CodeMode -benchtime 10x"; got != want {
		t.Errorf("command = %q, want %q", got, want)
	}
}
