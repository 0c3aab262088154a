//go:build envtest

package cabundle_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/cabundle"
	"github.com/widgetry/widget-operator/internal/scheme"
	"github.com/widgetry/widget-operator/internal/testenv"
	"github.com/widgetry/widget-operator/internal/testenv/testcerts"
)

// replica is a TLS listener on loopback presenting a certificate the test swaps, as a manager
// replica does when it reloads a renewed one.
type replica struct {
	port int
	cert atomic.Pointer[tls.Certificate]
}

func startReplica(t *testing.T, s testcerts.Serving) *replica {
	t.Helper()
	r := &replica{}
	r.serve(t, s)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.cert.Load(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r.port = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	return r
}

func (r *replica) serve(t *testing.T, s testcerts.Serving) {
	c := s.TLSCertificate(t)
	r.cert.Store(&c)
}

// TestMaintainerOverlapsARotation runs the bundle's writer against a real apiserver and real
// TLS replicas (found through the Service's EndpointSlices): a new CA in the serving Secret
// joins the bundle at once, the old one stays while any replica presents a leaf it signed or
// a replica cannot be reached, and leaves when every replica serves the new leaf.
func TestMaintainerOverlapsARotation(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	ctx := context.Background()
	const ns, svc = "widget-system", "widget-operator-webhook"
	host := svc + "." + ns + ".svc"
	oldCA, newCA := testcerts.NewCA(t, "old CA"), testcerts.NewCA(t, "new CA")
	oldLeaf := oldCA.Issue(t, host)
	r0, r1 := startReplica(t, oldLeaf), startReplica(t, oldLeaf)

	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := env.Client.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	slice := func(name string, port int, terminating bool) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc,
			discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port))}},
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(!terminating), Terminating: ptr.To(terminating)}}}}
	}
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "serving", Namespace: ns},
			Data: map[string][]byte{"ca.crt": oldCA.PEM, "tls.crt": oldLeaf.CertPEM, "tls.key": oldLeaf.KeyPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bundle", Namespace: ns, Annotations: map[string]string{"cert-manager.io/allow-direct-injection": "true"}}},
		slice("r0", r0.port, false), slice("r1", r1.port, false))

	m := &cabundle.Maintainer{Reader: env.Client, Writer: env.Client, Namespace: ns, ServingSecret: "serving", BundleSecret: "bundle",
		Service: svc, ServerName: host, DialTimeout: 2 * time.Second,
		// The slices name 192.0.2.1 (TEST-NET-1; loopback is refused there); the replicas
		// listen on loopback at the same port.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
		}}
	log := testr.New(t)
	bundle := func(want ...string) {
		t.Helper()
		if err := m.Sync(ctx, log); err != nil {
			t.Fatal(err)
		}
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bundle"}, s); err != nil {
			t.Fatal(err)
		}
		certs, err := cabundle.Parse(s.Data["ca.crt"])
		if err != nil {
			t.Fatal(err)
		}
		if got := names(certs); !slices.Equal(got, want) {
			t.Fatalf("bundle holds %v, want %v", got, want)
		}
	}
	setServing := func(ca *testcerts.CA, leaf testcerts.Serving) {
		t.Helper()
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "serving"}, s); err != nil {
			t.Fatal(err)
		}
		s.Data = map[string][]byte{"ca.crt": ca.PEM, "tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM}
		if err := env.Client.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	// Install: the empty bundle gets the issued CA.
	bundle("old CA")
	// cert-manager reissues under a new CA; the replicas have not reloaded yet.
	newLeaf := newCA.Issue(t, host)
	setServing(newCA, newLeaf)
	bundle("old CA", "new CA")
	// One replica swapped: the other still needs the old CA.
	r0.serve(t, newLeaf)
	bundle("old CA", "new CA")
	// Both swapped, but a third replica is unreachable (its port closed): kept.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r1.serve(t, newLeaf)
	create(slice("r2", gone, false))
	bundle("old CA", "new CA")
	// That endpoint is terminating: it takes no new connection; the old CA leaves.
	stale := &discoveryv1.EndpointSlice{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "r2"}, stale); err != nil {
		t.Fatal(err)
	}
	stale.Endpoints[0].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Terminating: ptr.To(true)}
	if err := env.Client.Update(ctx, stale); err != nil {
		t.Fatal(err)
	}
	bundle("new CA")
	// Steady: nothing written (the resourceVersion stays).
	before := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bundle"}, before); err != nil {
		t.Fatal(err)
	}
	bundle("new CA")
	after := &corev1.Secret{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bundle"}, after); err != nil {
		t.Fatal(err)
	}
	if before.ResourceVersion != after.ResourceVersion {
		t.Errorf("a steady bundle was rewritten (resourceVersion %s → %s)", before.ResourceVersion, after.ResourceVersion)
	}
}

// TestMaintainerDropsAPlantedCA is the security review's attack on the bundle, against a real
// apiserver: someone who can write Secrets and EndpointSlices in the namespace adds a CA of
// their own to the bundle Secret, and an EndpointSlice (the Service's name label, not the
// EndpointSlice controller's) naming a server of theirs that presents a leaf of that CA, while
// a genuine replica cannot be reached. The next sync drops the planted CA. With the protection
// off (the negative control) the planted CA stays.
func TestMaintainerDropsAPlantedCA(t *testing.T) {
	env := testenv.Start(t, testenv.Options{Scheme: scheme.New()})
	ctx := context.Background()
	const svc = "widget-operator-webhook"
	host := svc + ".planted.svc"
	issuedCA, plantedCA := testcerts.NewCA(t, "issued CA"), testcerts.NewCA(t, "planted CA")
	issuedLeaf := issuedCA.Issue(t, host)
	genuine, attacker := startReplica(t, issuedLeaf), startReplica(t, plantedCA.Issue(t, host))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	for i, protected := range []bool{true, false} {
		ns := fmt.Sprintf("planted-%d", i)
		t.Run(fmt.Sprintf("protected=%t", protected), func(t *testing.T) {
			if !protected {
				defer cabundle.WithoutPlantedCAProtection()()
			}
			slice := func(name string, port int, managedBy string) *discoveryv1.EndpointSlice {
				return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
					Labels: map[string]string{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: managedBy}},
					AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port))}},
					Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}}
			}
			for _, o := range []client.Object{
				&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "serving", Namespace: ns},
					Data: map[string][]byte{"ca.crt": issuedCA.PEM, "tls.crt": issuedLeaf.CertPEM, "tls.key": issuedLeaf.KeyPEM}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bundle", Namespace: ns}},
				slice("genuine", genuine.port, "endpointslice-controller.k8s.io"),
				slice("genuine-gone", gone, "endpointslice-controller.k8s.io"),
			} {
				if err := env.Client.Create(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			m := &cabundle.Maintainer{Reader: env.Client, Writer: env.Client, Namespace: ns, ServingSecret: "serving", BundleSecret: "bundle",
				Service: svc, ServerName: host, DialTimeout: 2 * time.Second,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					_, port, _ := net.SplitHostPort(addr)
					return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
				}}
			sync := func() []string {
				t.Helper()
				if err := m.Sync(ctx, testr.New(t)); err != nil {
					t.Fatal(err)
				}
				s := &corev1.Secret{}
				if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bundle"}, s); err != nil {
					t.Fatal(err)
				}
				certs, err := cabundle.Parse(s.Data["ca.crt"])
				if err != nil {
					t.Fatal(err)
				}
				return names(certs)
			}
			if got := sync(); !slices.Equal(got, []string{"issued CA"}) {
				t.Fatalf("bundle %v after install", got)
			}
			// The attack: the planted CA appended to the bundle, and a slice of the attacker's.
			s := &corev1.Secret{}
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "bundle"}, s); err != nil {
				t.Fatal(err)
			}
			s.Data["ca.crt"] = append(s.Data["ca.crt"], plantedCA.PEM...)
			if err := env.Client.Update(ctx, s); err != nil {
				t.Fatal(err)
			}
			if err := env.Client.Create(ctx, slice("attacker", attacker.port, "someone")); err != nil {
				t.Fatal(err)
			}
			got := sync()
			if protected && !slices.Equal(got, []string{"issued CA"}) {
				t.Errorf("the planted CA stayed: bundle %v", got)
			}
			if !protected && !slices.Contains(got, "planted CA") {
				t.Errorf("negative control: without the protection the planted CA left anyway (bundle %v), so this test proves nothing", got)
			}
		})
	}
}
