package ratelimit

import (
	"encoding/json"
	"strconv"
)

// The values in the bucket are small JSON documents, readable with
// `nats kv get toolfleet_limits <key>`:
//
//   - rate: the theoretical arrival time in unix nanoseconds ("1700000000000000000");
//   - bytes: {"w": window start (unix nanoseconds), "u": bytes used};
//   - concurrent: {"<replica id>": {"n": running calls, "e": lease expiry (unix ms)}}.
//
// A value that does not decode reads as empty (a fresh budget).

func decodeInt(b []byte) int64 {
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}

func encodeInt(n int64) []byte { return strconv.AppendInt(nil, n, 10) }

type pair struct {
	W int64 `json:"w"`
	U int64 `json:"u"`
}

func decodePair(b []byte) (win, used int64) {
	var p pair
	if len(b) == 0 || json.Unmarshal(b, &p) != nil {
		return 0, 0
	}
	return p.W, p.U
}

func encodePair(win, used int64) []byte {
	b, _ := json.Marshal(pair{W: win, U: used})
	return b
}

type lease struct {
	N   int   `json:"n"`
	Exp int64 `json:"e"`
}

// maxLeases bounds the replicas one concurrency key lists (a value that
// lists more is read as empty rather than trusted).
const maxLeases = 1024

func decodeLeases(b []byte) map[string]lease {
	m := map[string]lease{}
	if len(b) == 0 || json.Unmarshal(b, &m) != nil || len(m) > maxLeases {
		return map[string]lease{}
	}
	return m
}

func encodeLeases(m map[string]lease) []byte {
	b, _ := json.Marshal(m)
	return b
}
