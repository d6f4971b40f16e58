package builtin

import (
	"net/url"
	"testing"
)

// TestHostListCheck covers matching cases the HTTP tests cannot reach with an IPv4 test server:
// IPv6 literals, default ports, and names that only Unicode case folding would make match.
func TestHostListCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		entries []string
		url     string
		want    bool
	}{
		{[]string{"::1"}, "http://[::1]:8080/", true},
		{[]string{"[::1]"}, "http://[::1]/", true},
		{[]string{"[::1]:8080"}, "http://[::1]:8080/", true},
		{[]string{"[::1]:8080"}, "http://[::1]/", false},
		{[]string{"::1"}, "http://[0:0:0:0:0:0:0:1]/", true}, // the same address
		{[]string{"127.0.0.1"}, "http://[::ffff:127.0.0.1]/", false},
		{[]string{"localhost"}, "http://[::1]/", false},
		{[]string{"api.test:443"}, "https://api.test/", true},
		{[]string{"api.test:443"}, "http://api.test/", false},
		{[]string{"api.test:80"}, "http://api.test:80/", true},
		{[]string{"kelvin.test"}, "http://\u212aelvin.test/", false}, // KELVIN SIGN folds to k
		{[]string{"*.test"}, "http://a.test/", true},
		{[]string{"*.test"}, "http://.test/", false},
		{nil, "http://a.test/", false},
	} {
		u, err := url.Parse(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		l := parseHostList(Options{AllowedHosts: tt.entries})
		if l.err != nil {
			t.Fatal(l.err)
		}
		if got := l.check(u) == nil; got != tt.want {
			t.Errorf("%v allows %s: %v, want %v", tt.entries, tt.url, got, tt.want)
		}
		if parseHostList(Options{AllowedHosts: tt.entries, AllowAnyHost: true}).check(u) != nil {
			t.Errorf("AllowAnyHost refused %s", tt.url)
		}
	}
}
