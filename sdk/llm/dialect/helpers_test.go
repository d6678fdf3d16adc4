package dialect

// convtest.WantBig is how the canonical arguments carry convtest.BigArgs.

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
