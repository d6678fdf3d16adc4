package contract

import (
	"errors"
	"testing"
)

// FuzzParseToolRef: every reference either fails with ErrBadToolRef or has a
// canonical spelling that parses back to itself, and a canonical spelling
// never exceeds MaxToolRefLen.
func FuzzParseToolRef(f *testing.F) {
	for _, s := range []string{"Calculator.Add", "Calculator.Add@1", "Calculator.Add@1.2.3", "Calculator_Add@2.0.0",
		"KV.Put@01.0.0", "a.b@", ".Add", "Calculator.", "Calc.Add@1.2.3.4", "Calculator.Add@999999999.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := ParseToolRef(s)
		if err != nil {
			if !errors.Is(err, ErrBadToolRef) {
				t.Fatalf("ParseToolRef(%q): untyped error %v", s, err)
			}
			return
		}
		canon := ref.String()
		if len(canon) > MaxToolRefLen {
			t.Fatalf("canonical %q of %q is longer than %d bytes", canon, s, MaxToolRefLen)
		}
		again, err := ParseToolRef(canon)
		if err != nil || again != ref {
			t.Fatalf("ParseToolRef(%q) = %+v, its canonical %q parses to %+v, %v", s, ref, canon, again, err)
		}
	})
}

// FuzzParseVersion: a version either fails with ErrBadVersion or is its own
// one spelling.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.0.0", "0.0.0", "01.0.0", "1.0", "1.0.0-rc1", "999999999.999999999.999999999", "+1.0.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseVersion(s)
		if err != nil {
			if !errors.Is(err, ErrBadVersion) {
				t.Fatalf("ParseVersion(%q): untyped error %v", s, err)
			}
			return
		}
		if v.String() != s {
			t.Fatalf("ParseVersion(%q) = %v, spelled %q", s, v, v.String())
		}
	})
}
