package idempotency

import "testing"

// Only a plain success ack skips kv.Create; every other reply goes through it.
func TestIsPlainPubAck(t *testing.T) {
	for ack, want := range map[string]bool{
		`{"stream":"KV_toolfleet_calls","seq":7}`:                                                                              true,
		`{"stream":"KV_toolfleet_calls","domain":"hub","seq":7}`:                                                               true,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_toolfleet_calls","seq":0}`: false,
		`{"stream":"KV_x","error":{"code":503}}`:                                                                               false,
		``:                                                                                                                     false,
		`not json`:                                                                                                             false,
	} {
		if got := isPlainPubAck([]byte(ack)); got != want {
			t.Errorf("isPlainPubAck(%s) = %v, want %v", ack, got, want)
		}
	}
}
