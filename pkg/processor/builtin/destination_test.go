package builtin_test

import (
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// TestDestination: an "http" job's destination is its URL's host, lower-cased, without port;
// a payload without a usable URL, or a host that is not a valid destination, has none.
func TestDestination(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		payload string
		want    string
		ok      bool
	}{
		{`{"url":"https://api.partner.example/v1/send"}`, "api.partner.example", true},
		{`{"url":"https://API.Partner.Example:8443/x?y=1","method":"PUT"}`, "api.partner.example", true},
		{`{"url":"http://sms-gw.example./"}`, "sms-gw.example", true},
		{`{"url":"http://10.0.0.7:8080/hook"}`, "10.0.0.7", true},
		{`{"url":"http://[::1]:8080/"}`, "", false}, // ':' is not a destination character
		{`{"url":"https://` + strings.Repeat("a", 129) + `/"}`, "", false},
		{`{"url":"ftp://files.example/"}`, "", false},
		{`{"url":"::bad"}`, "", false},
		{`{"method":"POST"}`, "", false}, // the processor's DefaultURL: not known at ingest
		{`{"url":42}`, "", false},
		{`"https://api.partner.example/"`, "", false}, // not an object: the whole payload is the body
		{``, "", false},
	} {
		got, ok := builtin.Destination([]byte(tc.payload))
		if got != tc.want || ok != tc.ok {
			t.Errorf("Destination(%s) = %q, %v; want %q, %v", tc.payload, got, ok, tc.want, tc.ok)
		}
	}
}
