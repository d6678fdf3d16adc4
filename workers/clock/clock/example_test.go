package clock_test

import (
	"context"
	"fmt"

	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	"github.com/toolfleet/toolfleet/workers/clock/clock"
)

func ExampleService_Convert() {
	svc := clock.New()
	resp, err := svc.Convert(context.Background(), &clockv1.ConvertRequest{
		Time:         "2026-03-01T09:30",
		FromTimeZone: "America/New_York",
		ToTimeZone:   "Asia/Kolkata",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.GetFrom().GetLocalTime(), resp.GetFrom().GetAbbreviation())
	fmt.Println(resp.GetTo().GetLocalTime(), resp.GetTo().GetDayOfWeek())
	// Output:
	// 2026-03-01T09:30:00-05:00 EST
	// 2026-03-01T20:00:00+05:30 Sunday
}
