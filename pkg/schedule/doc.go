// Package schedule computes when a group's sending windows are open
// (docs/ARCHITECTURE.md §5, "Schedules"): the instants at which each
// [contracts.Window] opens and closes, in its IANA time zone, across
// daylight-saving changes. It does no I/O and reads no clock: callers pass
// the time. Time zones come from the database embedded in package
// contracts ([contracts.LoadZone]), never from the host's.
package schedule
