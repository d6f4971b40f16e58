package tenantauth

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// InboxPrefix returns the inbox prefix a tenant's client must use, "_INBOX_<tenant>", e.g. with
// nats.CustomInboxPrefix(InboxPrefix("acme")); [Permissions] lets the tenant subscribe to
// "_INBOX_<tenant>.>" only. tenant must be valid (see [contracts.ValidateTenant]).
func InboxPrefix(tenant string) string { return "_INBOX_" + tenant }

// grant is one allowed subject and what it is for.
type grant struct {
	subject string
	why     string
}

// grants returns the publish and subscribe allow lists of tenant, in the order of the package
// documentation.
func grants(n contracts.Names, tenant string) (pub, sub []grant, err error) {
	if err := n.Validate(); err != nil {
		return nil, nil, fmt.Errorf("tenantauth: names: %w", err)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return nil, nil, fmt.Errorf("tenantauth: %w", err)
	}
	events := n.StreamEvents()
	pub = []grant{
		{n.SubmitTenant(tenant), "its own submissions (a JetStream publish; the PubAck comes back on the inbox)"},
		{"$JS.API.CONSUMER.CREATE." + events + ".*." + n.EventsTenant(tenant),
			"create a consumer on " + events + ", only with a filter inside its own events"},
		{"$JS.API.CONSUMER.MSG.NEXT." + events + ".*", "pull messages from that consumer"},
	}
	sub = []grant{
		{n.EventsTenant(tenant), "its own events, live (core NATS subscription)"},
		{InboxPrefix(tenant) + ".>", "replies: PubAcks, JetStream API responses, pulled messages"},
	}
	return pub, sub, nil
}

func subjects(gs []grant) []string {
	s := make([]string, len(gs))
	for i, g := range gs {
		s[i] = g.subject
	}
	return s
}

// Permissions returns the NATS permissions of tenant's user for the installation named by n: it
// may publish its own submissions and create and pull from consumers of the EVENTS stream filtered
// to its own events, and subscribe to its own events and to its own inbox ([InboxPrefix]). The
// subjects are listed in the package documentation. It fails if n's prefix or tenant is invalid
// ([contracts.Names.Validate], [contracts.ValidateTenant]).
func Permissions(n contracts.Names, tenant string) (*server.Permissions, error) {
	pub, sub, err := grants(n, tenant)
	if err != nil {
		return nil, err
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: subjects(pub)},
		Subscribe: &server.SubjectPermission{Allow: subjects(sub)},
	}, nil
}

// variableRef matches a nats-server configuration variable reference, which the server resolves
// from a variable defined earlier in the file or from the environment.
var variableRef = regexp.MustCompile(`^\$[A-Za-z_][A-Za-z0-9_]*$`)

// ConfigSnippet renders tenant's user as a block of a nats-server configuration's
// authorization { users: [ … ] } list, with the permissions of [Permissions] and a comment on each
// subject. A password of the form $NAME is written unquoted, as a reference to the variable or
// environment variable NAME (the usual way to keep secrets out of the file); anything else (a
// literal or a bcrypt hash) is written as a quoted string. user and password must not be empty
// nor contain invalid UTF-8, double quotes, backslashes or control characters.
func ConfigSnippet(n contracts.Names, tenant, user, password string) (string, error) {
	pub, sub, err := grants(n, tenant)
	if err != nil {
		return "", err
	}
	if err := confString("user", user); err != nil {
		return "", err
	}
	if err := confString("password", password); err != nil {
		return "", err
	}
	pw := `"` + password + `"`
	if variableRef.MatchString(password) {
		pw = password
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# bulkaction tenant %s: its own submissions and events, nothing else.\n", tenant)
	fmt.Fprintf(&b, "# The client must use the inbox prefix %q (nats.CustomInboxPrefix).\n", InboxPrefix(tenant))
	b.WriteString("{\n")
	fmt.Fprintf(&b, "  user: \"%s\"\n", user)
	fmt.Fprintf(&b, "  password: %s\n", pw)
	b.WriteString("  permissions: {\n")
	list := func(name string, gs []grant) {
		fmt.Fprintf(&b, "    %s: {\n      allow: [\n", name)
		for _, g := range gs {
			fmt.Fprintf(&b, "        # %s\n        %q\n", g.why, g.subject)
		}
		b.WriteString("      ]\n    }\n")
	}
	list("publish", pub)
	list("subscribe", sub)
	b.WriteString("  }\n}\n")
	return b.String(), nil
}

// confString checks that v can be written between double quotes in a nats-server configuration
// as is.
func confString(field, v string) error {
	if v == "" {
		return fmt.Errorf("tenantauth: %s: empty", field)
	}
	for _, r := range v {
		if r < ' ' || r == 0x7f || r == '"' || r == '\\' || r == utf8.RuneError {
			return errors.New("tenantauth: " + field + ": must be UTF-8 without double quotes, backslashes or control characters")
		}
	}
	return nil
}
