package apiservers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Service every kube-apiserver registers its advertise address in (the lease endpoint
// reconciler, the default): one endpoint per live instance, the port of its secure serving.
const (
	serviceNamespace = "default"
	serviceName      = "kubernetes"
	servicePortName  = "https"
	// Service names it for messages.
	Service = serviceNamespace + "/" + serviceName
)

// Instances lists the kube-apiserver instances registered in the EndpointSlices of Service
// default/kubernetes, as host:port. Only what is listed is seen: an instance stopped for
// longer than its lease (15s), or with --endpoint-reconciler-type=none, is not.
func Instances(ctx context.Context, c client.Reader) ([]string, error) {
	var list discoveryv1.EndpointSliceList
	if err := c.List(ctx, &list, client.InNamespace(serviceNamespace), client.MatchingLabels{discoveryv1.LabelServiceName: serviceName}); err != nil {
		return nil, fmt.Errorf("list the EndpointSlices of Service %s/%s (where each kube-apiserver registers its address): %w", serviceNamespace, serviceName, err)
	}
	return EndpointAddresses(list.Items), nil
}

// EndpointAddresses returns host:port of every address in the slices, with the port named
// https (or a slice's only port), sorted, without duplicates. Not-ready endpoints count too:
// an instance that is listed may still take writes.
func EndpointAddresses(endpointSlices []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, s := range endpointSlices {
		port, ok := slicePort(s.Ports)
		if !ok {
			continue
		}
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func slicePort(ports []discoveryv1.EndpointPort) (int32, bool) {
	for _, p := range ports {
		if p.Port != nil && (len(ports) == 1 || p.Name != nil && *p.Name == servicePortName) {
			return *p.Port, true
		}
	}
	return 0, false
}
