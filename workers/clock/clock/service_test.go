package clock

import (
	"strings"
	"testing"
	"time"

	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// pinned is 2026-07-14T10:00:00Z, a Tuesday in northern summer.
var pinned = time.Date(2026, time.July, 14, 10, 0, 0, 0, time.UTC)

func TestNow(t *testing.T) {
	t.Parallel()
	svc := New(WithNow(func() time.Time { return pinned }))
	tests := []struct {
		zone                          string
		wantLocal, wantOffset, wantTZ string
		wantAbbr                      string
		wantDST                       bool
		wantErr                       string
	}{
		{zone: "", wantLocal: "2026-07-14T10:00:00Z", wantOffset: "+00:00", wantTZ: "UTC", wantAbbr: "UTC"},
		{zone: "Europe/Paris", wantLocal: "2026-07-14T12:00:00+02:00", wantOffset: "+02:00", wantTZ: "Europe/Paris", wantAbbr: "CEST", wantDST: true},
		{zone: "Asia/Kolkata", wantLocal: "2026-07-14T15:30:00+05:30", wantOffset: "+05:30", wantTZ: "Asia/Kolkata", wantAbbr: "IST"},
		{zone: "America/St_Johns", wantLocal: "2026-07-14T07:30:00-02:30", wantOffset: "-02:30", wantTZ: "America/St_Johns", wantAbbr: "NDT", wantDST: true},
		{zone: "Mars/Olympus_Mons", wantErr: `unknown time zone "Mars/Olympus_Mons" in timeZone; use an IANA name such as "Europe/Paris"`},
		{zone: "Local", wantErr: `unknown time zone "Local"`},
	}
	for _, tt := range tests {
		t.Run(tt.zone, func(t *testing.T) {
			t.Parallel()
			resp, err := svc.Now(t.Context(), &clockv1.NowRequest{TimeZone: tt.zone})
			if tt.wantErr != "" {
				assertExecError(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("Now: %v", err)
			}
			got := resp.GetTime()
			if got.GetLocalTime() != tt.wantLocal || got.GetUtcOffset() != tt.wantOffset || got.GetTimeZone() != tt.wantTZ ||
				got.GetAbbreviation() != tt.wantAbbr || got.GetIsDst() != tt.wantDST || got.GetDayOfWeek() != "Tuesday" {
				t.Errorf("Now(%q) = %v", tt.zone, got)
			}
			if !got.GetTimestamp().AsTime().Equal(pinned) {
				t.Errorf("timestamp = %v, want %v", got.GetTimestamp().AsTime(), pinned)
			}
		})
	}
}

func TestConvert(t *testing.T) {
	t.Parallel()
	svc := New()
	tests := []struct {
		name             string
		req              *clockv1.ConvertRequest
		wantFrom, wantTo string
		wantFromTZ       string
		wantNote         string
		wantErr          string
	}{
		{
			name:     "wall time in New York to Paris",
			req:      &clockv1.ConvertRequest{Time: "2026-03-01T09:30", FromTimeZone: "America/New_York", ToTimeZone: "Europe/Paris"},
			wantFrom: "2026-03-01T09:30:00-05:00", wantTo: "2026-03-01T15:30:00+01:00", wantFromTZ: "America/New_York",
		},
		{
			name:     "UTC instant to Tokyo",
			req:      &clockv1.ConvertRequest{Time: "2026-12-31T20:15:00Z", ToTimeZone: "Asia/Tokyo"},
			wantFrom: "2026-12-31T20:15:00Z", wantTo: "2027-01-01T05:15:00+09:00", wantFromTZ: "UTC",
		},
		{
			name:     "fixed offset wins over from_time_zone",
			req:      &clockv1.ConvertRequest{Time: "2026-05-10 08:00:00+05:30", FromTimeZone: "Europe/Berlin", ToTimeZone: "UTC"},
			wantFrom: "2026-05-10T08:00:00+05:30", wantTo: "2026-05-10T02:30:00Z", wantFromTZ: "UTC+05:30",
		},
		{
			name:     "date only is midnight in the source zone",
			req:      &clockv1.ConvertRequest{Time: "2026-01-15", FromTimeZone: "Australia/Sydney", ToTimeZone: "UTC"},
			wantFrom: "2026-01-15T00:00:00+11:00", wantTo: "2026-01-14T13:00:00Z", wantFromTZ: "Australia/Sydney",
		},
		{
			name:     "skipped wall time at spring forward",
			req:      &clockv1.ConvertRequest{Time: "2026-03-08T02:30", FromTimeZone: "America/New_York", ToTimeZone: "UTC"},
			wantFrom: "2026-03-08T03:30:00-04:00", wantTo: "2026-03-08T07:30:00Z", wantFromTZ: "America/New_York",
			wantNote: "does not exist in America/New_York",
		},
		{
			name:     "repeated wall time at fall back uses the first",
			req:      &clockv1.ConvertRequest{Time: "2026-11-01T01:30", FromTimeZone: "America/New_York", ToTimeZone: "UTC"},
			wantFrom: "2026-11-01T01:30:00-04:00", wantTo: "2026-11-01T05:30:00Z", wantFromTZ: "America/New_York",
			wantNote: "occurred twice in America/New_York (clocks went back); used the first, 2026-11-01T01:30:00-04:00; the second is 2026-11-01T01:30:00-05:00",
		},
		{
			name:    "unreadable time",
			req:     &clockv1.ConvertRequest{Time: "next tuesday", ToTimeZone: "UTC"},
			wantErr: `cannot read time "next tuesday"; use RFC 3339`,
		},
		{
			name:    "unknown target zone",
			req:     &clockv1.ConvertRequest{Time: "2026-01-01T00:00:00Z", ToTimeZone: "PST"},
			wantErr: `unknown time zone "PST" in toTimeZone`,
		},
		{
			name:    "unknown source zone",
			req:     &clockv1.ConvertRequest{Time: "2026-01-01T00:00", FromTimeZone: "Europe/Atlantis", ToTimeZone: "UTC"},
			wantErr: `unknown time zone "Europe/Atlantis" in fromTimeZone`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := svc.Convert(t.Context(), tt.req)
			if tt.wantErr != "" {
				assertExecError(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			if got := resp.GetFrom().GetLocalTime(); got != tt.wantFrom {
				t.Errorf("from = %s, want %s", got, tt.wantFrom)
			}
			if got := resp.GetTo().GetLocalTime(); got != tt.wantTo {
				t.Errorf("to = %s, want %s", got, tt.wantTo)
			}
			if got := resp.GetFrom().GetTimeZone(); got != tt.wantFromTZ {
				t.Errorf("from time zone = %s, want %s", got, tt.wantFromTZ)
			}
			if !resp.GetFrom().GetTimestamp().AsTime().Equal(resp.GetTo().GetTimestamp().AsTime()) {
				t.Errorf("from and to are different instants: %v", resp)
			}
			if (tt.wantNote == "") != (resp.GetNote() == "") || !strings.Contains(resp.GetNote(), tt.wantNote) {
				t.Errorf("note = %q, want it to contain %q", resp.GetNote(), tt.wantNote)
			}
		})
	}
}

// assertExecError checks that err is an execution error whose message contains want.
func assertExecError(t *testing.T, err error, want string) {
	t.Helper()
	te, ok := tool.AsToolError(err)
	if !ok {
		t.Fatalf("err = %v (%T), want an execution error", err, err)
	}
	if !strings.Contains(te.GetMessage(), want) {
		t.Errorf("message = %q, want it to contain %q", te.GetMessage(), want)
	}
}
