package retry_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/retry"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	noJitter := retry.Policy{MaxAttempts: 5, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Jitter: -1}
	tests := []struct {
		name      string
		p         retry.Policy
		suggested []time.Duration // per retry
		want      []time.Duration // waits; fewer than suggested when the attempts run out
	}{
		{"doubles, capped", noJitter, make([]time.Duration, 5), []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}},
		{"suggested delay wins, capped", noJitter, []time.Duration{300 * time.Millisecond, time.Hour}, []time.Duration{300 * time.Millisecond, time.Second}},
		{"one attempt", retry.Policy{MaxAttempts: 1}, []time.Duration{0}, nil},
		{"multiplier", retry.Policy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Minute, Multiplier: 3, Jitter: -1},
			[]time.Duration{0, 0, 0}, []time.Duration{time.Second, 3 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := tt.p.Backoff()
			var got []time.Duration
			for _, s := range tt.suggested {
				d, ok := b.Next(s)
				if !ok {
					break
				}
				got = append(got, d)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("waits %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("waits %v, want %v", got, tt.want)
				}
			}
			if b.Attempts() != len(got)+1 {
				t.Fatalf("Attempts() = %d after %d waits", b.Attempts(), len(got))
			}
		})
	}
}

// TestJitter: jittered waits stay within ±Jitter of the exponential wait and
// are not all the same.
func TestJitter(t *testing.T) {
	t.Parallel()
	p := retry.Policy{MaxAttempts: 2, InitialBackoff: time.Second, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for range 50 {
		d, ok := p.Backoff().Next(0)
		if !ok || d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("wait %v, want within [0.5s, 1.5s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Fatalf("50 jittered waits were all %v", seen)
	}
}

// TestFromProto: a contract's fields win; unset ones come from the fallback.
func TestFromProto(t *testing.T) {
	t.Parallel()
	fallback := retry.Policy{MaxAttempts: 7, InitialBackoff: time.Second, MaxBackoff: time.Minute}
	got := retry.FromProto(&toolfleetv1.RetryPolicy{MaxAttempts: 2, InitialBackoff: durationpb.New(50 * time.Millisecond)}).Or(fallback)
	want := retry.Policy{MaxAttempts: 2, InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Minute}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := retry.FromProto(nil).Or(fallback); got != fallback {
		t.Fatalf("no contract policy: got %+v, want the fallback", got)
	}
}
