// Package schedule computes when a group's sending windows are open
// (docs/ARCHITECTURE.md §5, "Schedules"): the instants at which each
// [contracts.Window] opens and closes, in its IANA time zone, across
// daylight-saving changes. It does no I/O and reads no clock: callers pass
// the time. Time zones come from the time package's database; a binary
// that must not depend on the host's imports time/tzdata.
package schedule
