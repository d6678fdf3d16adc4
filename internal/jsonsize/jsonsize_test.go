package jsonsize

import (
	"strings"
	"testing"
)

func TestValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		json       string
		limit, min int
	}{
		{`1`, 0, 1},
		{`[1,2,3]`, 0, 4},
		{`{"a":[1,2],"b":{"c":"x,y[{"}}`, 0, 6},
		{`"a\"[,{"`, 0, 1},
		{`[` + strings.Repeat("0,", 1000) + `0]`, 0, 1002},
	}
	for _, tt := range tests {
		if got := Values([]byte(tt.json), tt.limit); got < tt.min {
			t.Errorf("Values(%s) = %d, want at least %d", tt.json, got, tt.min)
		}
	}
	// Early stop: no more than limit+1 is counted.
	if got := Values([]byte(`[`+strings.Repeat("0,", 1000)+`0]`), 10); got != 11 {
		t.Errorf("with limit 10: %d, want 11", got)
	}
}
