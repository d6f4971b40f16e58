package contracts

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Weekdays are the day names of [Window.Days], Sunday first as in [time.Weekday].
var Weekdays = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// ParseWeekday returns the day a [Window.Days] entry names.
func ParseWeekday(s string) (time.Weekday, bool) {
	for i, d := range Weekdays {
		if d == s {
			return time.Weekday(i), true
		}
	}
	return 0, false
}

// ParseClock returns the minutes after midnight of a "HH:MM" local time of a [Window]
// ("00:00" to "24:00").
func ParseClock(s string) (int, bool) {
	if len(s) != 5 || s[2] != ':' {
		return 0, false
	}
	h, err1 := strconv.Atoi(s[:2])
	m, err2 := strconv.Atoi(s[3:])
	if err1 != nil || err2 != nil || s[0] == '+' || s[3] == '+' || h < 0 || m < 0 || m > 59 || h > 24 || (h == 24 && m > 0) {
		return 0, false
	}
	return h*60 + m, true
}

// ParseNotBefore parses a [GroupSettings.NotBefore] (RFC 3339, with its offset).
func ParseNotBefore(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, invalidField("notBefore", strconv.Quote(truncate(s, 64))+" is not an RFC 3339 date-time",
			"an RFC 3339 date-time with a time zone offset, e.g. 2026-11-27T09:00:00+01:00")
	}
	return t, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// checkNotBefore checks a notBefore against the time now.
func checkNotBefore(s string, now time.Time) error {
	t, err := ParseNotBefore(s)
	if err != nil {
		return err
	}
	if t.After(now.Add(MaxNotBeforeAhead)) {
		return invalidField("notBefore", s+" is more than 366 days ahead", "at most 366 days after the time it is submitted")
	}
	if t.Year() < 2000 {
		return invalidField("notBefore", s+" is before the year 2000", "a date-time in the year 2000 or later")
	}
	return nil
}

// ValidateWindows checks sending windows, naming a fault as "<field>[i].<name>"; field is
// "windows" for a tenant's default windows and "group.windows" within a group's settings. It
// returns a [*ValidationError], or nil.
func ValidateWindows(field string, ws []Window) error {
	if len(ws) > MaxWindows {
		return invalidField(field, strconv.Itoa(len(ws))+" windows", "at most "+strconv.Itoa(MaxWindows))
	}
	for i, w := range ws {
		if err := w.validate(); err != nil {
			return prefixed(field+"["+strconv.Itoa(i)+"].", err)
		}
	}
	return nil
}

// LoadZone returns the location of a [Window.Zone]: an IANA name, never "" or "Local", from the
// time zone database embedded in this package (the Go distribution's), not the host's, so that
// every process computes a window's times alike.
func LoadZone(zone string) (*time.Location, error) {
	if zone == "" || zone == "Local" || len(zone) > 64 {
		return nil, invalidField("zone", strconv.Quote(truncate(zone, 64)), "an IANA time zone name, e.g. Europe/Berlin or UTC")
	}
	loc, err := loadEmbeddedZone(zone)
	if err != nil {
		return nil, invalidField("zone", strconv.Quote(zone)+" is not a known time zone", "an IANA time zone name, e.g. Europe/Berlin or UTC")
	}
	return loc, nil
}

func (w Window) validate() error {
	if _, err := LoadZone(w.Zone); err != nil {
		return err
	}
	if len(w.Days) < 1 || len(w.Days) > 7 {
		return invalidField("days", strconv.Itoa(len(w.Days))+" days", "1 to 7 of mon, tue, wed, thu, fri, sat, sun")
	}
	var seen [7]bool
	for i, d := range w.Days {
		wd, ok := ParseWeekday(d)
		f := "days[" + strconv.Itoa(i) + "]"
		if !ok {
			return invalidField(f, strconv.Quote(truncate(d, 16)), "one of mon, tue, wed, thu, fri, sat, sun")
		}
		if seen[wd] {
			return invalidField(f, strconv.Quote(d)+" repeated", "each day at most once")
		}
		seen[wd] = true
	}
	from, ok := ParseClock(w.From)
	if !ok || from == 24*60 {
		return invalidField("from", strconv.Quote(truncate(w.From, 16)), "a local time HH:MM from 00:00 to 23:59")
	}
	to, ok := ParseClock(w.To)
	if !ok {
		return invalidField("to", strconv.Quote(truncate(w.To, 16)), "a local time HH:MM from 00:00 to 24:00")
	}
	if to == from {
		return invalidField("to", fmt.Sprintf("%q equals from", w.To), "a time other than from (00:00 to 24:00 is a whole day)")
	}
	return nil
}

// String returns w in the text form [ParseWindow] reads:
// "mon,tue,wed 09:00-17:00 Europe/Berlin".
func (w Window) String() string {
	return strings.Join(w.Days, ",") + " " + w.From + "-" + w.To + " " + w.Zone
}

// windowTextLimit is the text form a window parameter or flag takes.
const windowTextLimit = "DAYS FROM-TO ZONE, e.g. \"mon-fri 09:00-17:00 Europe/Berlin\" (days: mon…sun, comma-separated or a range; times HH:MM; an IANA zone)"

// ParseWindow reads a window in its text form, "DAYS FROM-TO ZONE": DAYS
// a comma-separated list of day names and ranges ("mon-fri", "sat,sun",
// "fri-mon" wraps), FROM-TO local times HH:MM, ZONE an IANA time zone name;
// "mon-fri 09:00-17:00 Europe/Berlin". The window is validated; an error
// is a [*ValidationError] naming field.
func ParseWindow(field, s string) (Window, error) {
	parts := strings.Fields(s)
	if len(parts) != 3 {
		return Window{}, invalidField(field, strconv.Quote(truncate(s, 80)), windowTextLimit)
	}
	var w Window
	for _, d := range strings.Split(parts[0], ",") {
		a, b, isRange := strings.Cut(d, "-")
		wa, ok1 := ParseWeekday(a)
		wb, ok2 := wa, true
		if isRange {
			wb, ok2 = ParseWeekday(b)
		}
		if !ok1 || !ok2 {
			return Window{}, invalidField(field, "day "+strconv.Quote(truncate(d, 16)), windowTextLimit)
		}
		for x := wa; ; x = (x + 1) % 7 {
			w.Days = append(w.Days, Weekdays[x])
			if x == wb {
				break
			}
		}
	}
	from, to, ok := strings.Cut(parts[1], "-")
	if !ok {
		return Window{}, invalidField(field, "times "+strconv.Quote(truncate(parts[1], 16)), windowTextLimit)
	}
	w.From, w.To, w.Zone = from, to, parts[2]
	if err := w.validate(); err != nil {
		return Window{}, prefixed(field+".", err)
	}
	return w, nil
}
