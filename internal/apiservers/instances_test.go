package apiservers

import (
	"context"
	"slices"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/widgetry/widget-operator/internal/scheme"
)

func endpoint(ready bool, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
}

func port(name string, p int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(p)}
}

func TestEndpointAddresses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		want   []string
	}{
		{"none", nil, nil},
		{"what the lease reconciler writes: one port, one address per instance", []discoveryv1.EndpointSlice{{
			Ports:     []discoveryv1.EndpointPort{port("https", 6443)},
			Endpoints: []discoveryv1.Endpoint{endpoint(true, "10.0.0.12"), endpoint(true, "10.0.0.11")},
		}}, []string{"10.0.0.11:6443", "10.0.0.12:6443"}},
		{"not-ready instances may still take writes", []discoveryv1.EndpointSlice{{
			Ports:     []discoveryv1.EndpointPort{port("https", 6443)},
			Endpoints: []discoveryv1.Endpoint{endpoint(false, "10.0.0.11")},
		}}, []string{"10.0.0.11:6443"}},
		{"the https port among several", []discoveryv1.EndpointSlice{{
			Ports:     []discoveryv1.EndpointPort{port("metrics", 9090), port("https", 443)},
			Endpoints: []discoveryv1.Endpoint{endpoint(true, "10.0.0.11")},
		}}, []string{"10.0.0.11:443"}},
		{"a single port whatever its name", []discoveryv1.EndpointSlice{{
			Ports:     []discoveryv1.EndpointPort{port("", 8443)},
			Endpoints: []discoveryv1.Endpoint{endpoint(true, "10.0.0.11")},
		}}, []string{"10.0.0.11:8443"}},
		{"several ports, none https: nothing to ask", []discoveryv1.EndpointSlice{{
			Ports:     []discoveryv1.EndpointPort{port("a", 1), port("b", 2)},
			Endpoints: []discoveryv1.Endpoint{endpoint(true, "10.0.0.11")},
		}}, nil},
		{"no port", []discoveryv1.EndpointSlice{{
			Ports:     []discoveryv1.EndpointPort{{Name: ptr.To("https")}},
			Endpoints: []discoveryv1.Endpoint{endpoint(true, "10.0.0.11")},
		}}, nil},
		{"IPv6 in brackets, duplicates across slices once", []discoveryv1.EndpointSlice{
			{AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("https", 6443)},
				Endpoints: []discoveryv1.Endpoint{endpoint(true, "fd00::2")}},
			{AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{port("https", 6443)},
				Endpoints: []discoveryv1.Endpoint{endpoint(true, "fd00::2"), endpoint(true, "fd00::3")}},
		}, []string{"[fd00::2]:6443", "[fd00::3]:6443"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EndpointAddresses(tc.slices); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestInstances reads only the slices of Service default/kubernetes.
func TestInstances(t *testing.T) {
	slice := func(namespace, name, service, addr string) client.Object {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
			Ports:      []discoveryv1.EndpointPort{port("https", 6443)}, Endpoints: []discoveryv1.Endpoint{endpoint(true, addr)},
		}
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(
		slice("default", "kubernetes", "kubernetes", "10.0.0.11"),
		slice("default", "kubernetes-extra", "kubernetes", "10.0.0.12"),
		slice("default", "other-abcde", "other", "10.0.0.99"),
		slice("elsewhere", "kubernetes", "kubernetes", "10.0.0.98"),
	).Build()
	got, err := Instances(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.11:6443", "10.0.0.12:6443"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
