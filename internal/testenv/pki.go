package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a private certificate authority made for one test, with a server
// certificate for the loopback address and a client certificate, each as
// PEM files in a temporary directory.
type PKI struct {
	Dir string
	// CA is the authority's certificate, which servers and clients trust.
	CA string
	// ServerCert and ServerKey are the server's, for 127.0.0.1, ::1 and
	// localhost.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client's, with common name "dlock".
	ClientCert, ClientKey string
	// OtherCA is a second authority's certificate, which signed none of
	// the above: a client that trusts only it must refuse the server.
	OtherCA string
}

// NewPKI makes a PKI in a directory of t's.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	p := &PKI{Dir: dir}
	caKey, caCert := newCA(t, "dlock test CA")
	p.CA = writePEM(t, dir, "ca.pem", "CERTIFICATE", caCert.Raw)
	p.ServerCert, p.ServerKey = issue(t, dir, "server", caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	p.ClientCert, p.ClientKey = issue(t, dir, "client", caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "dlock"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	_, other := newCA(t, "another CA")
	p.OtherCA = writePEM(t, dir, "other-ca.pem", "CERTIFICATE", other.Raw)
	return p
}

// newCA makes a certificate authority called name.
func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	return sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, nil, nil)
}

// issue signs tmpl with the CA and writes <name>.pem and <name>-key.pem.
func issue(t testing.TB, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (cert, key string) {
	t.Helper()
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	k, c := sign(t, tmpl, ca, caKey)
	kder, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name+".pem", "CERTIFICATE", c.Raw), writePEM(t, dir, name+"-key.pem", "PRIVATE KEY", kder)
}

// sign makes a key and a certificate of tmpl for it, valid from an hour
// ago for a day, with a random serial number: signed by parent with
// parentKey, or by itself when parent is nil.
func sign(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, k
	}
	tmpl.SerialNumber, _ = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return k, cert
}

func writePEM(t testing.TB, dir, file, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, file)
	must(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
	return path
}

// ClientTLS returns a client configuration that trusts the PKI's CA and
// presents its client certificate.
func (p *PKI) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(p.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	cert, err := tls.LoadX509KeyPair(p.ClientCert, p.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}
