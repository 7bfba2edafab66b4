package driver_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlockgo/dlock/driver"
	"github.com/dlockgo/dlock/internal/testenv"
)

func parse(t *testing.T, raw string) driver.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return driver.NewURL(u)
}

// TestTLS: the TLS parameters build the configuration they name, files
// are read at once, and every mistake is a *ParamError naming its
// parameter.
func TestTLS(t *testing.T) {
	pki := testenv.NewPKI(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	q := "cacert=" + url.QueryEscape(pki.CA) + "&cert=" + url.QueryEscape(pki.ClientCert) + "&key=" + url.QueryEscape(pki.ClientKey)

	c, err := parse(t, "x://h?tls=true&"+q+"&server_name=db.internal").TLS(false)
	if err != nil || c == nil || c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "db.internal" || c.InsecureSkipVerify {
		t.Fatalf("tls=true with every file: %+v, %v", c, err)
	}
	if c, err := parse(t, "xs://h").TLS(true); err != nil || c == nil || c.RootCAs != nil {
		t.Fatalf("a TLS scheme alone: %+v, %v; want TLS with the system's roots", c, err)
	}
	if c, err := parse(t, "x://h").TLS(false); err != nil || c != nil {
		t.Fatalf("a plain URL: %+v, %v; want no TLS", c, err)
	}
	if c, err := parse(t, "x://h?tls=true&insecure_skip_verify=true").TLS(false); err != nil || !c.InsecureSkipVerify {
		t.Fatalf("insecure_skip_verify=true: %+v, %v", c, err)
	}

	for _, bad := range []struct{ url, param, says string }{
		{"x://h?cacert=" + url.QueryEscape(pki.CA), "cacert", "tls=true"},
		{"x://h?insecure_skip_verify=true", "insecure_skip_verify", "TLS connections only"},
		{"x://h?tls=yes please", "tls", "boolean"},
		{"x://h?tls=true&cacert=/nonexistent/ca.pem", "cacert", "no such file"},
		{"x://h?tls=true&cacert=" + url.QueryEscape(notPEM), "cacert", "no PEM certificate"},
		{"x://h?tls=true&cert=" + url.QueryEscape(pki.ClientCert), "cert", "key parameter"},
		{"x://h?tls=true&key=" + url.QueryEscape(pki.ClientKey), "key", "cert parameter"},
		{"x://h?tls=true&cert=" + url.QueryEscape(pki.ClientCert) + "&key=" + url.QueryEscape(notPEM), "cert", "with key"},
	} {
		_, err := parse(t, bad.url).TLS(false)
		var pe *driver.ParamError
		if !errors.As(err, &pe) || pe.Param != bad.param || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("%s: %v, want a ParamError for %q saying %q", bad.url, err, bad.param, bad.says)
		}
	}
	if _, err := parse(t, "xs://h?tls=false").TLS(true); err == nil || !strings.Contains(err.Error(), "always uses TLS") {
		t.Errorf("tls=false on a TLS scheme: %v", err)
	}
	// A key file's content never shows in the error.
	_, err = parse(t, "x://h?tls=true&cert="+url.QueryEscape(pki.ClientKey)+"&key="+url.QueryEscape(pki.ClientCert)).TLS(false)
	key, _ := os.ReadFile(pki.ClientKey)
	if err == nil || strings.Contains(err.Error(), strings.Split(string(key), "\n")[1]) {
		t.Errorf("swapped cert and key: %v", err)
	}
}
