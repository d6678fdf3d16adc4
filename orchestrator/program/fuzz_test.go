package program

import (
	"errors"
	"strings"
	"testing"
)

// FuzzCompile: any source a model or a user writes compiles or fails with a
// *ProgramError that points at a line and column of the script, never a
// panic or an error without a place.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"result = Calculator_Add(a=1, b=2).value",
		"def main():\n    return parallel([lambda: KV_Get(key=k) for k in args[\"keys\"]])\nresult = main()",
		"result = [", "load(\"x.star\", \"y\")\n", "def f(): return f()\nresult = f()", "result = 1 +", "\tresult = 1",
		"x = {\"a\": 1}\nresult = x.a", "result = json.decode(args[\"s\"])",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		chk, err := Compile("fuzz.star", src)
		if err == nil {
			if chk == nil {
				t.Fatal("no error and no check")
			}
			return
		}
		var pe *ProgramError
		if !errors.As(err, &pe) {
			t.Fatalf("untyped error %v", err)
		}
		if pe.Kind == "syntax" && !strings.HasPrefix(pe.Position, "fuzz.star:") {
			t.Fatalf("syntax error without a position: %+v", pe)
		}
	})
}
