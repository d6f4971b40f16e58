package cli

import (
	"errors"
	"fmt"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// ErrNoSuchGroup is wrapped by [NoSuchGroup]'s error: neither Redis nor
// the SUBMIT stream knows the group.
var ErrNoSuchGroup = errors.New("no such group")

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
