// Package cabundle decides which CA certificates the caBundle of the webhooks holds so that
// trust overlaps every rotation of the issuing CA. cert-manager's cainjector copies the
// serving Certificate's ca.crt into the caBundles: when the issuer's CA changes, the bundle
// swaps to the new CA at once while replicas still serve leaves of the old one, and every
// call the apiserver routes to them fails (x509: certificate signed by unknown authority)
// until the kubelet refreshes the mounted Secret and the replica reloads it.
//
// Here the bundle is a Secret of its own (ca.crt), injected by cainjector through
// cert-manager.io/inject-ca-from-secret, and Plan decides its next content: every CA the
// serving Secret names is added as soon as it appears; a CA leaves only when neither the
// issued certificate nor any replica's served one chains to it, every replica was asked, or
// when it has expired. The replicas, for their part, serve a renewed leaf only once the
// bundles trust it (the manager's reload gate), so the new CA is in the bundle before any
// replica presents a leaf signed by it.
package cabundle

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Parse reads every CERTIFICATE block of a PEM bundle; anything else in it is an error (the
// bundle is ours: a stray block means someone edited it).
func Parse(bundle []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := bundle
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("a %q PEM block where only certificates belong", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse a certificate of the bundle: %w", err)
		}
		certs = append(certs, c)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("the bundle has trailing data that is not PEM")
	}
	return certs, nil
}

// Encode writes certs as a PEM bundle, in order.
func Encode(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// Served is what one replica presents: its chain (leaf first), or why it could not be read.
type Served struct {
	Endpoint string
	Chain    []*x509.Certificate
	Err      error
}

// State is what Plan decides from.
type State struct {
	// Bundle is the bundle now.
	Bundle []*x509.Certificate
	// IssuedCAs is the serving Secret's ca.crt: the CA(s) its certificate chains to.
	IssuedCAs []*x509.Certificate
	// Issued is the serving Secret's tls.crt chain (leaf first); empty when not issued yet.
	Issued []*x509.Certificate
	// Served is every replica behind the webhook Service that may take a new connection,
	// ready or not.
	Served []Served
	// OnceIssued is every CA once named by the serving Secret's ca.crt (Fingerprint); nil:
	// not known, every CA of the bundle counts as once issued.
	OnceIssued map[string]bool
	Now        time.Time
}

// Fingerprint identifies a CA in OnceIssued: the SHA-256 of its DER, in hex.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// onceIssued tells whether ca was once named by the serving Secret.
func (s State) onceIssued(ca *x509.Certificate) bool {
	return s.OnceIssued == nil || s.OnceIssued[Fingerprint(ca)] || contains(s.IssuedCAs, ca)
}

// Change is one CA added to or removed from the bundle, and why.
type Change struct {
	CA     *x509.Certificate
	Reason string
}

// Plan returns the next bundle: the current one in order, plus every issued CA not in it, minus
// every CA that has expired or that nothing chains to anymore. A CA that something may still
// chain to stays: the issued chain or a served one chains to it, or a replica could not be
// asked and the CA was once issued (one planted in the bundle Secret, never named by the
// serving Secret, does not ride on an unreachable replica). The bundle never becomes empty
// while an issued CA exists.
func Plan(s State) (next []*x509.Certificate, added, removed []Change) {
	unreachable := 0
	for _, sv := range s.Served {
		if sv.Err != nil || len(sv.Chain) == 0 {
			unreachable++
		}
	}
	for _, ca := range s.Bundle {
		switch {
		case s.Now.After(ca.NotAfter):
			removed = append(removed, Change{ca, "expired at " + ca.NotAfter.UTC().Format(time.RFC3339)})
		case contains(s.IssuedCAs, ca):
			next = append(next, ca)
		case ChainsTo(s.Issued, ca):
			next = append(next, ca)
		case anyServedChainsTo(s.Served, ca):
			next = append(next, ca)
		case unreachable > 0 && s.onceIssued(ca):
			next = append(next, ca)
		case unreachable > 0:
			removed = append(removed, Change{ca, fmt.Sprintf("the serving Secret never named it (planted in the bundle Secret?); %d replica(s) could not be asked, but only CAs once issued are kept for them", unreachable)})
		default:
			removed = append(removed, Change{ca, fmt.Sprintf("neither the issued certificate nor any of the %d replicas' served ones chains to it", len(s.Served))})
		}
	}
	for _, ca := range s.IssuedCAs {
		if contains(next, ca) || s.Now.After(ca.NotAfter) {
			continue
		}
		next = append(next, ca)
		added = append(added, Change{ca, "the serving Secret's ca.crt names it"})
	}
	return next, added, removed
}

// Kept explains, for the log, why a CA that is not the issued one stays in the bundle.
func Kept(s State, ca *x509.Certificate) string {
	var why []string
	if ChainsTo(s.Issued, ca) {
		why = append(why, "the issued certificate chains to it")
	}
	for _, sv := range s.Served {
		switch {
		case sv.Err != nil:
			why = append(why, fmt.Sprintf("replica %s could not be asked (%v)", sv.Endpoint, sv.Err))
		case ChainsTo(sv.Chain, ca):
			why = append(why, fmt.Sprintf("replica %s serves a certificate that chains to it", sv.Endpoint))
		}
	}
	return strings.Join(why, "; ")
}

// ChainsTo says whether the chain's leaf verifies, through the chain's own intermediates, to
// ca. Time is not judged here (Plan removes an expired CA by itself): the check is made at
// the leaf's NotBefore, when every certificate of a sound chain was valid.
func ChainsTo(chain []*x509.Certificate, ca *x509.Certificate) bool {
	if len(chain) == 0 {
		return false
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates,
		CurrentTime: chain[0].NotBefore.Add(time.Second), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err == nil
}

func anyServedChainsTo(served []Served, ca *x509.Certificate) bool {
	for _, sv := range served {
		if ChainsTo(sv.Chain, ca) {
			return true
		}
	}
	return false
}

func contains(certs []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range certs {
		if bytes.Equal(x.Raw, c.Raw) {
			return true
		}
	}
	return false
}

// Describe names a certificate for logs and events: subject, serial and validity end.
func Describe(c *x509.Certificate) string {
	return fmt.Sprintf("%s (serial %s, notAfter %s)", c.Subject.String(), c.SerialNumber.Text(16), c.NotAfter.UTC().Format(time.RFC3339))
}
