package cabundle_test

import (
	"crypto/x509"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/widgetry/widget-operator/internal/cabundle"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
)

func chain(t *testing.T, s testcerts.Serving) []*x509.Certificate {
	t.Helper()
	c, err := cabundle.Parse(s.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func names(certs []*x509.Certificate) []string {
	out := make([]string, len(certs))
	for i, c := range certs {
		out[i] = c.Subject.CommonName
	}
	return out
}

// TestPlanOverlapsARotation walks a CA rotation step by step: the new CA joins the bundle the
// moment the serving Secret names it, and the old one leaves only once neither the issued
// certificate nor any replica chains to it and every replica could be asked.
func TestPlanOverlapsARotation(t *testing.T) {
	now := time.Now()
	oldCA, newCA := testcerts.NewCAValid(t, "old", now.Add(-time.Hour), now.Add(time.Hour)), testcerts.NewCA(t, "new")
	oldLeaf, newLeaf := chain(t, oldCA.Issue(t, "svc.ns.svc")), chain(t, newCA.Issue(t, "svc.ns.svc"))
	served := func(chains ...[]*x509.Certificate) []cabundle.Served {
		var out []cabundle.Served
		for _, c := range chains {
			out = append(out, cabundle.Served{Endpoint: "10.0.0.1:9443", Chain: c})
		}
		return out
	}
	for _, tc := range []struct {
		name                   string
		state                  cabundle.State
		want                   []string
		wantAdded, wantRemoved int
	}{
		{name: "empty bundle at install: the issued CA", want: []string{"old"}, wantAdded: 1,
			state: cabundle.State{IssuedCAs: []*x509.Certificate{oldCA.Cert}, Issued: oldLeaf, Served: served(oldLeaf)}},
		{name: "steady: nothing changes", want: []string{"old"},
			state: cabundle.State{Bundle: []*x509.Certificate{oldCA.Cert}, IssuedCAs: []*x509.Certificate{oldCA.Cert}, Issued: oldLeaf, Served: served(oldLeaf, oldLeaf)}},
		{name: "renewed by a new CA, replicas still on the old leaf: both", want: []string{"old", "new"}, wantAdded: 1,
			state: cabundle.State{Bundle: []*x509.Certificate{oldCA.Cert}, IssuedCAs: []*x509.Certificate{newCA.Cert}, Issued: newLeaf, Served: served(oldLeaf, oldLeaf)}},
		{name: "one replica swapped: both", want: []string{"old", "new"},
			state: cabundle.State{Bundle: []*x509.Certificate{oldCA.Cert, newCA.Cert}, IssuedCAs: []*x509.Certificate{newCA.Cert}, Issued: newLeaf, Served: served(newLeaf, oldLeaf)}},
		{name: "every replica swapped but one could not be asked: both", want: []string{"old", "new"},
			state: cabundle.State{Bundle: []*x509.Certificate{oldCA.Cert, newCA.Cert}, IssuedCAs: []*x509.Certificate{newCA.Cert}, Issued: newLeaf,
				Served: append(served(newLeaf), cabundle.Served{Endpoint: "10.0.0.2:9443", Err: errors.New("connection refused")})}},
		{name: "every replica serves the new leaf: the old CA leaves", want: []string{"new"}, wantRemoved: 1,
			state: cabundle.State{Bundle: []*x509.Certificate{oldCA.Cert, newCA.Cert}, IssuedCAs: []*x509.Certificate{newCA.Cert}, Issued: newLeaf, Served: served(newLeaf, newLeaf)}},
		{name: "an expired CA leaves even while served", want: []string{"new"}, wantRemoved: 1,
			state: cabundle.State{Bundle: []*x509.Certificate{oldCA.Cert, newCA.Cert}, IssuedCAs: []*x509.Certificate{newCA.Cert}, Issued: newLeaf, Served: served(oldLeaf),
				Now: oldCA.Cert.NotAfter.Add(time.Second)}},
		{name: "the issued CA stays while no replica serves it yet", want: []string{"new"},
			state: cabundle.State{Bundle: []*x509.Certificate{newCA.Cert}, IssuedCAs: []*x509.Certificate{newCA.Cert}, Issued: newLeaf}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.state.Now.IsZero() {
				tc.state.Now = now
			}
			next, added, removed := cabundle.Plan(tc.state)
			if got := names(next); !slices.Equal(got, tc.want) {
				t.Errorf("bundle %v, want %v", got, tc.want)
			}
			if len(added) != tc.wantAdded || len(removed) != tc.wantRemoved {
				t.Errorf("added %d, removed %d; want %d, %d", len(added), len(removed), tc.wantAdded, tc.wantRemoved)
			}
		})
	}
}

// TestParseRefusesWhatIsNotACertificate: the bundle is ours; a key or junk in it is an error.
func TestParseRefusesWhatIsNotACertificate(t *testing.T) {
	ca := testcerts.NewCA(t, "ca")
	leaf := ca.Issue(t, "x")
	if got, err := cabundle.Parse(cabundle.Encode([]*x509.Certificate{ca.Cert})); err != nil || len(got) != 1 {
		t.Fatalf("round trip: %v, %d", err, len(got))
	}
	if _, err := cabundle.Parse(leaf.KeyPEM); err == nil {
		t.Error("a private key parsed as a bundle")
	}
	if _, err := cabundle.Parse(append(append([]byte{}, ca.PEM...), "junk"...)); err == nil {
		t.Error("trailing junk accepted")
	}
}

// TestChainsTo: a leaf chains to its issuer, not to another CA, and no chain chains to nothing.
func TestChainsTo(t *testing.T) {
	a, b := testcerts.NewCA(t, "a"), testcerts.NewCA(t, "b")
	leaf := chain(t, a.Issue(t, "x"))
	if !cabundle.ChainsTo(leaf, a.Cert) || cabundle.ChainsTo(leaf, b.Cert) || cabundle.ChainsTo(nil, a.Cert) {
		t.Error("ChainsTo judged wrong")
	}
}

// TestPlanDropsAPlantedCA: a CA written into the bundle Secret that the serving Secret never
// named leaves it even while a replica cannot be asked; one once issued stays for that replica.
func TestPlanDropsAPlantedCA(t *testing.T) {
	issuedCA, oldCA, planted := testcerts.NewCA(t, "issued"), testcerts.NewCA(t, "old"), testcerts.NewCA(t, "planted")
	issued := chain(t, issuedCA.Issue(t, "svc.ns.svc"))
	bundle := []*x509.Certificate{issuedCA.Cert, oldCA.Cert, planted.Cert}
	unreachable := []cabundle.Served{{Endpoint: "192.0.2.9:9443", Err: errors.New("i/o timeout")}}
	s := cabundle.State{Bundle: bundle, IssuedCAs: []*x509.Certificate{issuedCA.Cert}, Issued: issued, Served: unreachable, Now: time.Now(),
		OnceIssued: map[string]bool{cabundle.Fingerprint(oldCA.Cert): true}}
	next, _, removed := cabundle.Plan(s)
	if got := names(next); !slices.Equal(got, []string{"issued", "old"}) {
		t.Errorf("bundle %v, want the issued CA and the once-issued old one", got)
	}
	if len(removed) != 1 || removed[0].CA != planted.Cert {
		t.Errorf("removed %v, want the planted CA", removed)
	}
	// Without a record (a bundle from before it), every CA it holds counts as once issued.
	s.OnceIssued = nil
	if next, _, _ := cabundle.Plan(s); len(next) != 3 {
		t.Errorf("without a record, bundle %v, want all three kept for the unreachable replica", names(next))
	}
}
