package apiclient

import "github.com/bulkaction/bulkaction/pkg/api"

// The API's bodies (package api), by the names this client uses.
type (
	// Group is a group's view ([api.Group]).
	Group = api.Group
	// GroupStatus is the live part of a group's view.
	GroupStatus = api.GroupStatus
	// Hold is one reason a group waits.
	Hold = api.Hold
	// GroupList is a page of groups.
	GroupList = api.GroupList
	// SubmitResult is the answer to a submission (202).
	SubmitResult = api.SubmitResponse
	// ControlResult is the answer to seal, cancel, pause and resume (202).
	ControlResult = api.ControlResponse
	// Failure is one failed job of a group.
	Failure = api.Failure
	// FailureList is a page of a group's failed jobs, newest first.
	FailureList = api.FailureList
	// RetryResult is the answer to retry-failed (202).
	RetryResult = api.RetryResponse
	// Job is one job of a submission.
	Job = api.Job
)
