package driver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLS parameters, read by URL.TLS, the same on every backend that dials
// its store itself (redis, redlock, etcd, zk; PostgreSQL and MySQL take
// their drivers' own).
const (
	// ParamTLS turns TLS on ("true") for a scheme that does not say so.
	ParamTLS = "tls"
	// ParamCACert names a PEM file of the authorities whose certificates
	// the client trusts; default the system's.
	ParamCACert = "cacert"
	// ParamCert and ParamKey name the PEM files of the client's own
	// certificate and private key, for servers that ask for one (both or
	// neither).
	ParamCert = "cert"
	ParamKey  = "key"
	// ParamInsecureSkipVerify ("true") accepts any server certificate:
	// for tests only, as anyone on the path can then read and forge the
	// traffic.
	ParamInsecureSkipVerify = "insecure_skip_verify"
	// ParamServerName is the name the server's certificate must carry;
	// default the host dialled.
	ParamServerName = "server_name"
)

// TLSFileParams shape a TLS connection, besides ParamTLS which turns it on.
var TLSFileParams = []string{ParamCACert, ParamCert, ParamKey, ParamInsecureSkipVerify, ParamServerName}

// TLS returns the client TLS configuration (TLS 1.2 at least) the URL asks
// for, or nil for a plain connection. TLS is on when on is true (the
// scheme says so, as rediss:// or etcds:// do) or the parameter tls is
// true; TLSFileParams then shape it. The files are read here: a missing or
// unreadable file, a file without a certificate or key, cert without key
// (or the reverse), and any of these parameters on a plain connection are
// each a *ParamError naming the parameter.
func (u URL) TLS(on bool) (*tls.Config, error) {
	explicit := u.Has(ParamTLS)
	enabled, err := u.Bool(ParamTLS, on)
	if err != nil {
		return nil, err
	}
	if on && explicit && !enabled {
		return nil, u.Err(ParamTLS, "false", fmt.Errorf("the %s:// scheme always uses TLS", u.Scheme))
	}
	caFile := u.String(ParamCACert, "")
	certFile := u.String(ParamCert, "")
	keyFile := u.String(ParamKey, "")
	skip, err := u.Bool(ParamInsecureSkipVerify, false)
	if err != nil {
		return nil, err
	}
	serverName := u.String(ParamServerName, "")
	if !enabled {
		for _, p := range TLSFileParams {
			if u.Has(p) {
				return nil, u.Err(p, u.q.Get(p), errors.New("applies to TLS connections only: add tls=true (or use the scheme's TLS form)"))
			}
		}
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: skip, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, u.Err(ParamCACert, caFile, err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, u.Err(ParamCACert, caFile, errors.New("holds no PEM certificate"))
		}
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			// The key file's content is never quoted: name the files.
			return nil, u.Err(ParamCert, certFile, fmt.Errorf("with key %s: %w", keyFile, err))
		}
		c.Certificates = []tls.Certificate{cert}
	case certFile != "":
		return nil, u.Err(ParamCert, certFile, errors.New("needs the key parameter too: the client's private key file"))
	case keyFile != "":
		return nil, u.Err(ParamKey, keyFile, errors.New("needs the cert parameter too: the client's certificate file"))
	}
	return c, nil
}
