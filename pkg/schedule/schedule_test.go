package schedule_test

import (
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/schedule"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func iv(open, close string) schedule.Interval {
	return schedule.Interval{Open: utc(open), Close: utc(close)}
}

// TestIntervalsAcrossDaylightSaving computes windows in two zones on the
// days their clocks change, with a fixed clock.
func TestIntervalsAcrossDaylightSaving(t *testing.T) {
	w := func(zone, from, to string, days ...string) contracts.Window {
		return contracts.Window{Zone: zone, Days: days, From: from, To: to}
	}
	tests := []struct {
		name string
		ws   []contracts.Window
		now  string
		want []schedule.Interval
		// week: look 8 days ahead rather than 3 (the next week's too)
		week bool
	}{{
		// 2026-03-29 02:00 CET jumps to 03:00 CEST (01:00 UTC): 02:30 does
		// not exist, the window opens at the jump
		name: "Berlin spring forward, a from that does not exist",
		ws:   []contracts.Window{w("Europe/Berlin", "02:30", "04:00", "sun")},
		now:  "2026-03-28T12:00:00Z",
		want: []schedule.Interval{iv("2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z")},
	}, {
		name: "Berlin spring forward, a window inside the missing hour never opens that day",
		week: true,
		ws:   []contracts.Window{w("Europe/Berlin", "02:10", "02:50", "sun")},
		now:  "2026-03-28T12:00:00Z",
		want: []schedule.Interval{iv("2026-04-05T00:10:00Z", "2026-04-05T00:50:00Z")},
	}, {
		name: "Berlin the week before and after: 09:00 local is 08:00 then 07:00 UTC",
		week: true,
		ws:   []contracts.Window{w("Europe/Berlin", "09:00", "17:00", "sat", "mon")},
		now:  "2026-03-28T00:00:00Z",
		want: []schedule.Interval{
			iv("2026-03-28T08:00:00Z", "2026-03-28T16:00:00Z"),
			iv("2026-03-30T07:00:00Z", "2026-03-30T15:00:00Z"),
			iv("2026-04-04T07:00:00Z", "2026-04-04T15:00:00Z"),
		},
	}, {
		// 2026-10-25 03:00 CEST goes back to 02:00 CET (01:00 UTC): 02:00
		// to 03:00 is shown twice and inside the window both times
		name: "Berlin fall back, a repeated hour",
		ws:   []contracts.Window{w("Europe/Berlin", "02:00", "03:00", "sun")},
		now:  "2026-10-24T12:00:00Z",
		want: []schedule.Interval{iv("2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z")},
	}, {
		// 2026-03-08 02:00 EST jumps to 03:00 EDT (07:00 UTC)
		name: "New York spring forward, a night window across the jump",
		ws:   []contracts.Window{w("America/New_York", "22:00", "06:00", "sat")},
		now:  "2026-03-07T12:00:00Z",
		// Saturday 22:00 EST (03:00 UTC) to Sunday 06:00 EDT (10:00 UTC): 7 hours
		want: []schedule.Interval{iv("2026-03-08T03:00:00Z", "2026-03-08T10:00:00Z")},
	}, {
		name: "New York spring forward, 02:30 opens at the jump",
		ws:   []contracts.Window{w("America/New_York", "02:30", "03:30", "sun")},
		now:  "2026-03-07T12:00:00Z",
		want: []schedule.Interval{iv("2026-03-08T07:00:00Z", "2026-03-08T07:30:00Z")},
	}, {
		// 2026-11-01 02:00 EDT goes back to 01:00 EST (06:00 UTC): 01:00 to
		// 02:00 is shown twice
		name: "New York fall back, a window within the repeated hour opens twice",
		ws:   []contracts.Window{w("America/New_York", "01:15", "01:45", "sun")},
		now:  "2026-10-31T12:00:00Z",
		want: []schedule.Interval{
			iv("2026-11-01T05:15:00Z", "2026-11-01T05:45:00Z"),
			iv("2026-11-01T06:15:00Z", "2026-11-01T06:45:00Z"),
		},
	}, {
		name: "New York fall back, a night window is an hour longer",
		ws:   []contracts.Window{w("America/New_York", "00:00", "04:00", "sun")},
		now:  "2026-10-31T12:00:00Z",
		want: []schedule.Interval{iv("2026-11-01T04:00:00Z", "2026-11-01T09:00:00Z")},
	}, {
		name: "two zones merged, and the current window first",
		week: true,
		ws: []contracts.Window{
			w("Europe/Berlin", "09:00", "12:00", "fri"),
			w("America/New_York", "05:00", "08:00", "fri"), // 10:00-13:00 UTC in November
		},
		now:  "2026-11-27T10:30:00Z",
		want: []schedule.Interval{iv("2026-11-27T08:00:00Z", "2026-11-27T13:00:00Z"), iv("2026-12-04T08:00:00Z", "2026-12-04T13:00:00Z")},
	}, {
		name: "a whole day touching the next is one interval",
		ws:   []contracts.Window{w("UTC", "00:00", "24:00", "mon", "tue")},
		now:  "2026-11-22T00:00:00Z", // a Sunday
		want: []schedule.Interval{iv("2026-11-23T00:00:00Z", "2026-11-25T00:00:00Z")},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			horizon := 3 * 24 * time.Hour
			if tt.week {
				horizon = 0
			}
			got, err := schedule.Intervals(tt.ws, utc(tt.now), horizon, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if !got[i].Open.Equal(tt.want[i].Open) || !got[i].Close.Equal(tt.want[i].Close) {
					t.Fatalf("interval %d: got %v, want %v (all: %v)", i, got[i], tt.want[i], got)
				}
			}
		})
	}
}

func TestEncodeDecodeNext(t *testing.T) {
	ivs := []schedule.Interval{iv("2026-11-27T08:00:00Z", "2026-11-27T13:00:00Z"), iv("2026-12-04T08:00:00Z", "2026-12-04T13:00:00Z")}
	back, err := schedule.Decode(schedule.Encode(ivs))
	if err != nil || len(back) != 2 || !back[1].Close.Equal(ivs[1].Close) {
		t.Fatalf("decode: %v %v", back, err)
	}
	if open, at := schedule.Next(ivs, utc("2026-11-27T09:00:00Z")); !open || !at.Equal(ivs[0].Close) {
		t.Fatalf("inside: %v %v", open, at)
	}
	if open, at := schedule.Next(ivs, utc("2026-11-27T13:00:00Z")); open || !at.Equal(ivs[1].Open) {
		t.Fatalf("between: %v %v", open, at)
	}
	if open, at := schedule.Next(ivs, utc("2026-12-05T00:00:00Z")); open || !at.IsZero() {
		t.Fatalf("after: %v %v", open, at)
	}
}

func TestIntervalsRefusesInvalidWindows(t *testing.T) {
	_, err := schedule.Intervals([]contracts.Window{{Zone: "Mars/Olympus", Days: []string{"mon"}, From: "09:00", To: "10:00"}}, time.Now(), 0, 0)
	if err == nil || err.Error() == "" {
		t.Fatal("an unknown zone was taken")
	}
}
