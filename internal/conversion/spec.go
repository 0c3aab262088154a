package conversion

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// SpecToHub converts a v1alpha1 spec to v1, restoring from data what v1alpha1 cannot hold.
func SpecToHub(in *v1alpha1.WidgetSpec, data RestoreData, out *v1.WidgetSpec) error {
	out.Size = copyPtr(in.Replicas)
	out.Image = in.Image
	out.Timeout = timeoutToHub(in.TimeoutSeconds, data.Timeout)
	out.Paused = copyPtr(data.Paused)
	endpoints, err := endpointsToHub(in.Endpoints)
	if err != nil {
		return err
	}
	out.Endpoints = endpoints
	return nil
}

// SpecFromHub converts a v1 spec to v1alpha1 and returns what v1alpha1 cannot hold, for the
// conversion-data annotation.
func SpecFromHub(in *v1.WidgetSpec, out *v1alpha1.WidgetSpec) (RestoreData, error) {
	var data RestoreData
	out.Replicas = copyPtr(in.Size)
	out.Image = in.Image
	seconds, exact, err := timeoutFromHub(in.Timeout)
	if err != nil {
		return RestoreData{}, err
	}
	out.TimeoutSeconds = seconds
	if !exact {
		data.Timeout = copyPtr(in.Timeout)
	}
	data.Paused = copyPtr(in.Paused)
	out.Endpoints = endpointsFromHub(in.Endpoints)
	return data, nil
}

// timeoutToHub renders whole seconds as a Go duration, unless the annotation's exact value
// still rounds up to those seconds: then the v1alpha1 side has not changed it and the exact
// value comes back. A v1alpha1 edit wins over a stale annotation.
func timeoutToHub(seconds *int32, exact *string) *string {
	if seconds == nil {
		return nil
	}
	if exact != nil {
		if d, err := time.ParseDuration(*exact); err == nil && d > 0 && ceilSeconds(d) == int64(*seconds) {
			return copyPtr(exact)
		}
	}
	s := (time.Duration(*seconds) * time.Second).String()
	return &s
}

// timeoutFromHub rounds a duration up to whole seconds and reports whether the canonical
// rendering of those seconds is the very same string (then no annotation is needed).
func timeoutFromHub(timeout *string) (seconds *int32, exact bool, err error) {
	if timeout == nil {
		return nil, true, nil
	}
	d, err := time.ParseDuration(*timeout)
	if err != nil {
		return nil, false, fmt.Errorf("spec.timeout %q is not a Go duration: %w", *timeout, err)
	}
	if d <= 0 {
		return nil, false, fmt.Errorf("spec.timeout %q must be positive", *timeout)
	}
	s := ceilSeconds(d)
	if s > math.MaxInt32 {
		return nil, false, fmt.Errorf("spec.timeout %q does not fit v1alpha1 spec.timeoutSeconds (int32 seconds)", *timeout)
	}
	n := int32(s)
	return &n, (time.Duration(s) * time.Second).String() == *timeout, nil
}

func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// endpointsToHub turns the list into the map. A duplicate name cannot be represented in the
// map, and picking one would silently drop the other, so it is an error.
func endpointsToHub(in []v1alpha1.Endpoint) (map[string]v1.EndpointSpec, error) {
	if in == nil {
		return nil, nil
	}
	out := make(map[string]v1.EndpointSpec, len(in))
	for i, e := range in {
		if _, dup := out[e.Name]; dup {
			return nil, fmt.Errorf("spec.endpoints[%d]: duplicate endpoint name %q; endpoint names must be unique", i, e.Name)
		}
		out[e.Name] = v1.EndpointSpec{Port: e.Port}
	}
	return out, nil
}

// endpointsFromHub turns the map into a list sorted by name, so the result is deterministic.
func endpointsFromHub(in map[string]v1.EndpointSpec) []v1alpha1.Endpoint {
	if in == nil {
		return nil
	}
	out := make([]v1alpha1.Endpoint, 0, len(in))
	for name, e := range in {
		out = append(out, v1alpha1.Endpoint{Name: name, Port: e.Port})
	}
	slices.SortFunc(out, func(a, b v1alpha1.Endpoint) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
