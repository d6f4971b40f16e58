package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// ErrNoSuchGroup is wrapped by [CheckExists]'s error: neither Redis nor
// the SUBMIT stream knows the group.
var ErrNoSuchGroup = errors.New("no such group")

// Submitted reports whether the SUBMIT stream holds messages for g: jobs
// or controls published and perhaps not stored in Redis yet. It is false
// when js is nil.
func Submitted(ctx context.Context, js jetstream.JetStream, names contracts.Names, g contracts.GroupRef) (bool, error) {
	if js == nil {
		return false, nil
	}
	st, err := js.Stream(ctx, names.StreamSubmit())
	if err != nil {
		return false, err
	}
	subject := names.Submit(g)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return false, err
	}
	return info.State.Subjects[subject] > 0, nil
}

// FindGroup reads g from Redis. When Redis does not know it, pending says
// whether the SUBMIT stream holds messages for it (js may be nil: then
// false; true when SUBMIT cannot be read), so that a group submitted a moment ago and not stored yet is not
// taken for a typo.
func FindGroup(ctx context.Context, q *redisq.Queue, js jetstream.JetStream, names contracts.Names, g contracts.GroupRef) (info *redisq.GroupInfo, pending bool, err error) {
	info, ok, err := q.Group(ctx, g)
	if err != nil {
		return nil, false, err
	}
	if ok {
		return info, false, nil
	}
	pending, err = Submitted(ctx, js, names, g)
	if err != nil {
		// SUBMIT could not be read: take the group as on its way rather
		// than refuse what may be a group just submitted.
		return nil, true, nil
	}
	return nil, pending, nil
}

// NoSuchGroup is the error for a verb that names a group nobody
// submitted to: it wraps [ErrNoSuchGroup] and says what to do. create is
// the flag that makes the verb create the group anyway ("" when the verb
// has none).
func NoSuchGroup(g contracts.GroupRef, create string) error {
	msg := fmt.Sprintf("group %s of tenant %s does not exist (nothing was ever submitted to it, or it ended longer ago than %s_GROUP_TTL); "+
		"check the id and --tenant (\"bulkaction groups\" lists groups)", g.ID, g.Tenant, config.Prefix)
	if create != "" {
		msg += "; to act on it before its first job, add " + create
	}
	return &noSuchGroupError{msg: msg + ". Nothing was done"}
}

// noSuchGroupError is NoSuchGroup's error.
type noSuchGroupError struct{ msg string }

func (e *noSuchGroupError) Error() string { return e.msg }
func (e *noSuchGroupError) Unwrap() error { return ErrNoSuchGroup }
