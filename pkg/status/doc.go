// Package status is the one model of a group's status: [Read] computes it
// from the queue (package redisq) in one place, and [Group.View] is its one
// shape on the wire, the body of the HTTP API's GET /v1/groups/{groupId}
// ([api.Group]). The gateway, `bulkaction status` (its table and its
// --json) and the dashboard all show this type; [FromView] turns the API's
// view back into it for a client that reads over HTTP.
//
// A group's status is its counts (queued, in flight, backing off, done,
// cancelled), where it stands in the fair queue, its rate and ETA, its
// congestion, what holds it ([Hold], in the order of
// [redisq.HoldReasons], then [HoldAwaitingJobs]), its refusals, its
// completion callback and its retry links.
package status
