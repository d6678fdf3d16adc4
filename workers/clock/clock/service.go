// Package clock implements the Clock toolkit (tools.clock.v1.ClockService): the
// current time in an IANA time zone, and conversion of a time between zones.
//
// The IANA database is embedded (time/tzdata), so the worker gives the same answers
// on a bare container image as on a developer machine.
package clock

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
	_ "time/tzdata" // the zone database, for images without /usr/share/zoneinfo

	"google.golang.org/protobuf/types/known/timestamppb"

	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
)

// Service implements clockv1.ClockServiceServer. The zero value is not usable; call New.
type Service struct {
	clockv1.UnimplementedClockServiceServer

	now func() time.Time
}

// Option configures a Service.
type Option func(*Service)

// WithNow replaces the time source (tests pin the clock with it). Default time.Now.
func WithNow(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// New returns the Clock service.
func New(opts ...Option) *Service {
	s := &Service{now: time.Now}
	for _, o := range opts {
		o(s)
	}
	return s
}

var _ clockv1.ClockServiceServer = (*Service)(nil)

// Now returns the current time in the requested zone (UTC when none is given).
func (s *Service) Now(_ context.Context, req *clockv1.NowRequest) (*clockv1.NowResponse, error) {
	loc, err := loadZone(req.GetTimeZone(), "timeZone")
	if err != nil {
		return nil, err
	}
	return &clockv1.NowResponse{Time: zoned(s.now().In(loc))}, nil
}

// Convert reads req.Time (RFC 3339, or a wall-clock time in from_time_zone) and
// returns it in to_time_zone.
func (s *Service) Convert(_ context.Context, req *clockv1.ConvertRequest) (*clockv1.ConvertResponse, error) {
	from, err := loadZone(req.GetFromTimeZone(), "fromTimeZone")
	if err != nil {
		return nil, err
	}
	to, err := loadZone(req.GetToTimeZone(), "toTimeZone")
	if err != nil {
		return nil, err
	}
	t, note, err := parseTime(strings.TrimSpace(req.GetTime()), from)
	if err != nil {
		return nil, err
	}
	return &clockv1.ConvertResponse{From: zoned(t), To: zoned(t.In(to)), Note: note}, nil
}

// loadZone resolves an IANA zone name; "" is UTC. "Local" is refused: the worker's own
// zone means nothing to the model.
func loadZone(name, field string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil || name == "Local" {
		return nil, tool.NewError(
			fmt.Sprintf("unknown time zone %q in %s; use an IANA name such as \"Europe/Paris\", \"America/New_York\", \"Asia/Kolkata\" or \"UTC\"", name, field),
			tool.WithPromptHint("Time zones are IANA names (Area/City), not abbreviations like PST or CEST; e.g. use \"America/Los_Angeles\" for Pacific time."),
		)
	}
	return loc, nil
}

// Layouts accepted for Convert's time.
var (
	// offsetLayouts carry their own offset; the zone argument is ignored.
	offsetLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02T15:04Z07:00"}
	// wallLayouts are wall-clock times read in from_time_zone.
	wallLayouts = []string{
		"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999",
		"2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02",
	}
)

// parseTime parses s, reading times without offset in loc. note explains the
// choice made for a wall-clock time that a DST change made ambiguous or skipped.
func parseTime(s string, loc *time.Location) (t time.Time, note string, err error) {
	for _, layout := range offsetLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			// Parse names an offset after the worker's Local zone when they agree;
			// the caller gave only an offset, so name the zone by it.
			if _, off := t.Zone(); t.Location() != time.UTC {
				t = t.In(time.FixedZone("UTC"+formatOffset(off), off))
			}
			return t, "", nil
		}
	}
	for _, layout := range wallLayouts {
		if wall, err := time.Parse(layout, s); err == nil {
			t, note := resolveWall(wall, loc)
			return t, note, nil
		}
	}
	return time.Time{}, "", tool.NewError(
		fmt.Sprintf("cannot read time %q; use RFC 3339 such as \"2026-03-01T09:30:00Z\" or \"2026-03-01T09:30:00+01:00\", or a wall-clock time such as \"2026-03-01T09:30\" with fromTimeZone", s),
	)
}

// resolveWall finds the instants at which loc's clocks show wall (whose fields are
// read as they are; its own zone is ignored). Around a DST change there may be two
// (clocks went back: the first is used) or none (clocks skipped ahead: the time
// is moved forward by the gap).
func resolveWall(wall time.Time, loc *time.Location) (time.Time, string) {
	naive := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), wall.Nanosecond(), time.UTC)
	// The offsets in force around the date: a day either side covers any transition.
	offsets := map[int]bool{}
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := naive.Add(probe).In(loc).Zone()
		offsets[off] = true
	}
	var matches []time.Time
	for off := range offsets {
		cand := naive.Add(-time.Duration(off) * time.Second).In(loc)
		if sameWall(cand, naive) {
			matches = append(matches, cand)
		}
	}
	sort.Slice(matches, func(i, j int) bool { return matches[i].Before(matches[j]) })
	layout := "2006-01-02T15:04:05"
	switch len(matches) {
	case 1:
		return matches[0], ""
	case 0:
		// Read it with the offset in force before the gap, which moves it forward by
		// the gap's length (02:30 becomes 03:30), as java.time and Python do.
		_, before := naive.Add(-26 * time.Hour).In(loc).Zone()
		t := naive.Add(-time.Duration(before) * time.Second).In(loc)
		return t, fmt.Sprintf("%s does not exist in %s (clocks skipped it for daylight saving time); used %s",
			naive.Format(layout), loc, t.Format(time.RFC3339))
	default:
		return matches[0], fmt.Sprintf("%s occurred twice in %s (clocks went back); used the first, %s; the second is %s",
			naive.Format(layout), loc, matches[0].Format(time.RFC3339), matches[len(matches)-1].Format(time.RFC3339))
	}
}

func sameWall(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd && a.Hour() == b.Hour() && a.Minute() == b.Minute() &&
		a.Second() == b.Second() && a.Nanosecond() == b.Nanosecond()
}

// zoned describes t in its own location.
func zoned(t time.Time) *clockv1.ZonedTime {
	abbr, off := t.Zone()
	return &clockv1.ZonedTime{
		Timestamp:        timestamppb.New(t),
		LocalTime:        t.Format(time.RFC3339Nano),
		TimeZone:         t.Location().String(),
		UtcOffset:        formatOffset(off),
		UtcOffsetSeconds: int32(off),
		Abbreviation:     abbr,
		IsDst:            t.IsDST(),
		DayOfWeek:        t.Weekday().String(),
	}
}

// formatOffset formats seconds east of UTC as +hh:mm.
func formatOffset(off int) string {
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return fmt.Sprintf("%c%02d:%02d", sign, off/3600, off%3600/60)
}
