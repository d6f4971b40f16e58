package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"strings"
	"syscall"

	"github.com/kelseyhightower/envconfig"
	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/config"
)

// execute runs root and returns its error in the words printed to the
// user (see friendly).
func execute(ctx context.Context, root *cobra.Command) error {
	return friendly(root.ExecuteContext(ctx))
}

// userError is an error in the words shown to the user; errors.Is and
// errors.As still reach the error it rewords.
type userError struct {
	msg string
	err error
}

func (e *userError) Error() string { return e.msg }
func (e *userError) Unwrap() error { return e.err }

// friendly rewords an error for the user: one sentence that names the
// setting or server at fault and what to do, without the names of the
// packages it passed through. Errors it does not know are returned as they
// are, less a leading package prefix.
func friendly(err error) error {
	if err == nil {
		return nil
	}
	var ec exitCode
	if errors.As(err, &ec) {
		return err
	}
	var pe *envconfig.ParseError
	if errors.As(err, &pe) {
		return &userError{msg: settingError(pe), err: err}
	}
	var ue *url.Error
	if errors.As(err, &ue) && dialFailed(err) {
		base := ue.URL
		if u, perr := url.Parse(ue.URL); perr == nil {
			base = u.Scheme + "://" + u.Host
		}
		return &userError{err: err, msg: fmt.Sprintf("the gateway at %s does not answer (%s): start it (\"bulkaction dev\" runs one; "+
			"\"bulkaction gateway\" runs it alone), or point --api or $%s at the gateway", base, dialCause(err), apiEnv)}
	}
	msg := err.Error()
	trimmed := trimPrefixes(msg)
	if trimmed != msg {
		return &userError{msg: trimmed, err: err}
	}
	return err
}

// packagePrefixes are the leading "<package>: " of errors that pass
// through to the user.
var packagePrefixes = []string{"config: ", "cli: ", "redisq: ", "client: ", "apiclient: ", "contracts: ", "natsutil: ", "conns: "}

func trimPrefixes(msg string) string {
	for again := true; again; {
		again = false
		for _, p := range packagePrefixes {
			if strings.HasPrefix(msg, p) {
				msg, again = strings.TrimPrefix(msg, p), true
			}
		}
	}
	return msg
}

// dialFailed reports an error of a connection that could not be made.
func dialFailed(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// dialCause is the reason a connection could not be made, in a few words.
func dialCause(err error) string {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT):
		return "timed out"
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return "unknown host " + de.Name
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// settingError says which variable holds a value of the wrong kind, and
// what it takes.
func settingError(pe *envconfig.ParseError) string {
	want := "a " + pe.TypeName
	switch pe.TypeName {
	case "int", "int64", "int32", "uint", "uint64":
		want = "a whole number"
	case "float64", "float32":
		want = "a number"
	case "bool":
		want = "true or false"
	case "Duration":
		want = "a duration such as 500ms, 30s or 5m"
	}
	msg := fmt.Sprintf("%s: %q is not %s", pe.KeyName, pe.Value, want)
	if f, ok := reflect.TypeOf(config.Config{}).FieldByName(pe.FieldName); ok {
		if def := f.Tag.Get("default"); def != "" {
			return msg + fmt.Sprintf("; set %s, or unset %s for the default (%s)", want, pe.KeyName, def)
		}
	}
	return msg + fmt.Sprintf("; set %s, or unset %s", want, pe.KeyName)
}
