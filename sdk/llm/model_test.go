package llm

import (
	"testing"
	"time"
)

func TestRetryAfterHeader(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		header map[string]string
		want   time.Duration
	}{
		{map[string]string{"Retry-After": "2"}, 2 * time.Second},
		{map[string]string{"Retry-After-Ms": "150", "Retry-After": "9"}, 150 * time.Millisecond},
		{map[string]string{"Retry-After": now.Add(3 * time.Second).Format(http1123)}, 3 * time.Second},
		{map[string]string{"Retry-After": "soon"}, 0},
		{nil, 0},
	}
	for _, tt := range tests {
		h := map[string][]string{}
		for k, v := range tt.header {
			h[k] = []string{v}
		}
		if got := RetryAfter(h, now); got != tt.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", tt.header, got, tt.want)
		}
	}
}

const http1123 = "Mon, 02 Jan 2006 15:04:05 GMT"
