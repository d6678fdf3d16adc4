package program_test

import (
	"testing"

	"github.com/toolfleet/toolfleet/e2e"
	"github.com/toolfleet/toolfleet/orchestrator/program"
	"github.com/toolfleet/toolfleet/services/gateway/ratelimit"
)

// TestRateLimitedCallWaitsTheGatewaysDelay: a program's second call is
// refused by a rate of one call per 5 s; Temporal retries the activity after
// the gateway's delay, not after the contract's backoff (1 s, then 2 s: the
// three attempts would all fall within the 5 s and the script would see a
// failure), and the program completes with both results.
func TestRateLimitedCallWaitsTheGatewaysDelay(t *testing.T) {
	t.Parallel()
	s := startStackWith(t, e2e.Options{Limits: ratelimit.Config{Rules: []ratelimit.Rule{
		{Name: "slow-adds", Tool: "calculator.add", Rate: 0.2, Burst: 1},
	}}})
	adds0 := s.fleet.Calculator.Adds.Load()
	out, err := s.run(t, program.Input{ProgramID: "rate-limited-1", Tools: []string{"Calculator.*"}, Source: `
first = Calculator_Add(a=1, b=2)
second = Calculator_Add(a=3, b=4)
result = [first.ok, second.ok, second.value["result"]]
`})
	if err != nil {
		t.Fatalf("program: %v", err)
	}
	if out.ResultJSON != `[true,true,7]` {
		t.Fatalf("result %s, want both calls to succeed", out.ResultJSON)
	}
	if n := s.fleet.Calculator.Adds.Load() - adds0; n != 2 {
		t.Fatalf("the calculator ran %d adds, want 2 (refused attempts run nothing)", n)
	}
	retried := false
	for _, ev := range history(t, s.temporal, "rate-limited-1").GetEvents() {
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && a.GetAttempt() > 1 {
			retried = true
		}
	}
	if !retried {
		t.Fatal("no activity was retried: the second call was never refused, so the test showed nothing")
	}
}
