// Package testcerts issues throw-away X.509 certificates for tests: a CA, and serving
// certificates it signs for the names and addresses a test's HTTPS server listens on.
package testcerts

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

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// PEM is the CA certificate, as a caBundle or a client's root.
	PEM []byte
}

// NewCA makes a self-signed ECDSA P-256 CA valid for a day.
func NewCA(tb testing.TB, commonName string) *CA {
	tb.Helper()
	return NewCAValid(tb, commonName, time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour))
}

// NewCAValid is NewCA with the validity period given.
func NewCAValid(tb testing.TB, commonName string, notBefore, notAfter time.Time) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatalf("testcerts: create CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("testcerts: parse CA: %v", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Serving is a serving certificate and its key, PEM-encoded.
type Serving struct {
	CertPEM, KeyPEM []byte
}

// Issue signs a serving certificate for hosts (DNS names or IP addresses), valid from a
// minute ago for a day.
func (ca *CA) Issue(tb testing.TB, hosts ...string) Serving {
	tb.Helper()
	return ca.IssueValid(tb, time.Now().Add(-time.Minute), time.Now().Add(24*time.Hour), hosts...)
}

// IssueValid is Issue with the validity period given: an expired certificate, or one not
// valid yet.
func (ca *CA) IssueValid(tb testing.TB, notBefore, notAfter time.Time, hosts ...string) Serving {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		tb.Fatalf("testcerts: issue for %v: %v", hosts, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatalf("testcerts: marshal key: %v", err)
	}
	return Serving{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}
}

// TLSCertificate returns s for a tls.Config.
func (s Serving) TLSCertificate(tb testing.TB) tls.Certificate {
	tb.Helper()
	c, err := tls.X509KeyPair(s.CertPEM, s.KeyPEM)
	if err != nil {
		tb.Fatalf("testcerts: key pair: %v", err)
	}
	return c
}

// WriteDir writes tls.crt and tls.key (the names of a kubernetes.io/tls Secret and of
// controller-runtime's certificate directory) into dir.
func (s Serving) WriteDir(tb testing.TB, dir string) {
	tb.Helper()
	for name, data := range map[string][]byte{"tls.crt": s.CertPEM, "tls.key": s.KeyPEM} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			tb.Fatal(err)
		}
		// Rename so a watcher never reads a half-written file.
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			tb.Fatal(err)
		}
	}
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("testcerts: generate key: %v", err)
	}
	return key
}

func serial(tb testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// CertPool is a pool holding only this CA, for clients.
func (ca *CA) CertPool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pool
}
