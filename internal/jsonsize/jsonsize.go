// Package jsonsize bounds the cost of decoding JSON before it is decoded.
//
// A JSON body is cheap to send and dear to decode into protobuf: every value of
// a google.protobuf.Struct becomes a heap object of ~100 bytes, so 3 MB of
// "[0,0,0,…]" costs ~200 MB and seconds of CPU in protojson. Counting the
// values first, with one pass over the bytes and no allocation, lets a server
// refuse such a body at the cost of reading it.
package jsonsize

// Values returns an upper bound of the number of JSON values in b (each array
// element, object member and container counts once), stopping early once the
// count exceeds limit (limit <= 0: no early stop). It does not validate b.
func Values(b []byte, limit int) int {
	n := 1
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case ',', '[', '{':
			n++
			if limit > 0 && n > limit {
				return n
			}
		}
	}
	return n
}
