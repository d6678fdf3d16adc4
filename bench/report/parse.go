package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// result is one benchmark line (or test) and the figures it reported.
type result struct {
	name    string
	metrics []metric
}

type metric struct {
	unit  string
	value float64
}

// perOp units say little here: every benchmark's iteration is a whole
// experiment whose own metrics carry the figures.
var perOp = map[string]bool{"ns/op": true, "B/op": true, "allocs/op": true}

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.+)$`)

// parseBench reads `go test -bench` output: "BenchmarkX-2  N  v unit  v unit…".
func parseBench(out string) []result {
	var rows []result
	for _, line := range strings.Split(out, "\n") {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		r := result{name: m[1]}
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil || perOp[f[i+1]] {
				continue
			}
			r.metrics = append(r.metrics, metric{f[i+1], v})
		}
		if len(r.metrics) > 0 {
			rows = append(rows, r)
		}
	}
	return rows
}

// logMetric reads one figure from a test's log: the first group of re.
type logMetric struct {
	unit string
	re   *regexp.Regexp
}

// historyMetrics read TestHistoryStaysSmall's line (orchestrator/agent/e2e_test.go).
var historyMetrics = []logMetric{
	{"turns", regexp.MustCompile(`(\d+) turns, tool results of`)},
	{"result-B", regexp.MustCompile(`tool results of (\d+) bytes`)},
	{"history-B", regexp.MustCompile(`history (\d+) bytes`)},
	{"history-events", regexp.MustCompile(`in (\d+) events`)},
	{"history-B/turn", regexp.MustCompile(`\((\d+) bytes/turn\)`)},
	{"transcript-B", regexp.MustCompile(`transcript (\d+) bytes`)},
	{"transcript-in-history-B", regexp.MustCompile(`would record at least (\d+) bytes`)},
}

var testName = regexp.MustCompile(`^--- PASS: (\S+)`)

// parseLog reads the metrics from a passing test's -v output.
func parseLog(out string, metrics []logMetric) []result {
	name := ""
	for _, line := range strings.Split(out, "\n") {
		if m := testName.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			name = m[1]
		}
	}
	if name == "" {
		return nil
	}
	r := result{name: name}
	for _, lm := range metrics {
		m := lm.re.FindStringSubmatch(out)
		if m == nil {
			return nil // the line changed: better no figures than wrong ones
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			return nil
		}
		r.metrics = append(r.metrics, metric{lm.unit, v})
	}
	return []result{r}
}

// table renders results as one column each and one row per unit, units in
// the order first reported.
func table(rows []result) string {
	var units []string
	seen := map[string]bool{}
	for _, r := range rows {
		for _, m := range r.metrics {
			if !seen[m.unit] {
				seen[m.unit] = true
				units = append(units, m.unit)
			}
		}
	}
	var b strings.Builder
	b.WriteString("| |")
	for _, r := range rows {
		b.WriteString(" " + r.name + " |")
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---|", len(rows)))
	b.WriteString("\n")
	for _, u := range units {
		b.WriteString("| " + u + " |")
		for _, r := range rows {
			cell := ""
			for _, m := range r.metrics {
				if m.unit == u {
					cell = formatValue(m.value)
				}
			}
			b.WriteString(" " + cell + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// formatValue keeps three significant digits for ratios and whole numbers
// for large figures.
func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

// replaceBlock replaces what lies between the markers of block name.
func replaceBlock(doc, name, block string) (string, error) {
	start, end := "<!-- bench:"+name+" -->", "<!-- /bench:"+name+" -->"
	i := strings.Index(doc, start)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("the document has no block %q: add the lines %s and %s where its figures go", name, start, end)
	}
	return doc[:i+len(start)] + "\n" + block + doc[j:], nil
}
