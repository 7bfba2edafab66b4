package dlock

import "testing"

// parseURL keeps url.Parse's answer for one host and takes a comma-separated
// host list, IPv6 literals included, whole into Host.
func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		raw, host, user, path, query string
	}{
		{"redis://127.0.0.1:6379/2?prefix=a:", "127.0.0.1:6379", "", "/2", "prefix=a:"},
		{"redlock://a:1,b:2,c:3", "a:1,b:2,c:3", "", "", ""},
		{"redlock://a:1,b", "a:1,b", "", "", ""},
		{"redlock://[::1]:1,[::1]:2?x=1#frag", "[::1]:1,[::1]:2", "", "", "x=1"},
		{"redlock://u:p@[::1],h:2/p", "[::1],h:2", "u:p", "/p", ""},
		{"redlock://:p@w,x", "w,x", ":p", "", ""},
	} {
		u, err := parseURL(tc.raw)
		if err != nil {
			t.Errorf("parseURL(%q): %v", tc.raw, err)
			continue
		}
		user := ""
		if u.User != nil {
			user = u.User.String()
		}
		if u.Host != tc.host || user != tc.user || u.Path != tc.path || u.RawQuery != tc.query {
			t.Errorf("parseURL(%q) = host %q user %q path %q query %q; want %q %q %q %q",
				tc.raw, u.Host, user, u.Path, u.RawQuery, tc.host, tc.user, tc.path, tc.query)
		}
	}
	for _, bad := range []string{"redlock://a b,c", "redlock://a,%zz", "redlock://h:1,h:2/%zz", "redis://[::1"} {
		if u, err := parseURL(bad); err == nil {
			t.Errorf("parseURL(%q) = %v, want an error", bad, u)
		}
	}
}
