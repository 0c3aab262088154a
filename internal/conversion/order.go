package conversion

import (
	"slices"
	"strings"

	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// EndpointOrderAnnotation holds, on a v1 Widget, the order a v1alpha1 client gave
// spec.endpoints, which v1's map cannot: the names joined by commas (endpoint names are DNS
// labels), written only when that order is not the names' sorted order, the one v1alpha1 gets
// back from the map. Without it a GitOps tool that applies a v1alpha1 manifest with
// endpoints [web, admin] reads back [admin, web] once the object is stored as v1, sees a
// difference forever and, with auto-sync, writes the object again and again.
//
// Conversion to v1alpha1 orders the list by it and removes it; a value that does not name
// every endpoint exactly once in an unsorted order (a v1 client changed the map since, or
// wrote the annotation itself) still orders what it names, and goes, verbatim, into the
// conversion-data annotation (RestoreData.EndpointOrder), so that converting back restores it
// exactly, as long as the v1alpha1 list is still in the order it gave.
const EndpointOrderAnnotation = "widgetry.io/v1alpha1-endpoint-order"

// EndpointOrder is the annotation's value for a v1alpha1 list: its names joined by commas,
// or "" when the list is in sorted order (or has fewer than two endpoints), which the map
// restores by itself.
func EndpointOrder(endpoints []v1alpha1.Endpoint) string {
	if slices.IsSortedFunc(endpoints, compareEndpoints) {
		return ""
	}
	var b strings.Builder
	for i, e := range endpoints {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e.Name)
	}
	return b.String()
}

// OrderEndpoints reorders endpoints, sorted by name as the map gives them, as order names
// them: those it names first, in its order (a name it repeats or that is not in the list is
// skipped), then the rest, still sorted. It reports whether order is exact: the annotation
// conversion from this list would write again (EndpointOrder of the result).
func OrderEndpoints(endpoints []v1alpha1.Endpoint, order string) bool {
	next := 0 // endpoints[:next] are placed
	for name := range strings.SplitSeq(order, ",") {
		i := slices.IndexFunc(endpoints[next:], func(e v1alpha1.Endpoint) bool { return e.Name == name })
		if i < 0 {
			continue
		}
		// Move it to next, shifting the ones in between up by one: the unnamed rest stays sorted.
		e := endpoints[next+i]
		copy(endpoints[next+1:next+i+1], endpoints[next:next+i])
		endpoints[next] = e
		next++
	}
	return order != "" && EndpointOrder(endpoints) == order
}

// HubEndpointOrder is the EndpointOrderAnnotation a v1 Widget converted from a v1alpha1 list
// gets, with data the spoke's conversion data; set false: none.
func HubEndpointOrder(endpoints []v1alpha1.Endpoint, data RestoreData) (value string, set bool) {
	return hubEndpointOrder(endpoints, data.EndpointOrder)
}

// RestoreEndpointOrder orders a v1alpha1 list converted from v1 (sorted) by the hub's
// EndpointOrderAnnotation, when it has one (has), and keeps the value in data unless the list
// gives it back exactly.
func RestoreEndpointOrder(endpoints []v1alpha1.Endpoint, annotation string, has bool, data *RestoreData) {
	if has && !OrderEndpoints(endpoints, annotation) {
		data.EndpointOrder = &annotation
	}
}

// hubEndpointOrder is the annotation a v1 Widget converted from a v1alpha1 list gets: the
// kept value while the list is still in the order it gives (so a round trip from v1 gives it
// back verbatim), else the list's own order; set reports whether there is an annotation.
func hubEndpointOrder(endpoints []v1alpha1.Endpoint, kept *string) (value string, set bool) {
	if kept != nil && sameOrderAs(endpoints, *kept) {
		return *kept, true
	}
	value = EndpointOrder(endpoints)
	return value, value != ""
}

// sameOrderAs reports whether ordering endpoints' names by order gives endpoints' own order.
func sameOrderAs(endpoints []v1alpha1.Endpoint, order string) bool {
	sorted := slices.Clone(endpoints)
	slices.SortFunc(sorted, compareEndpoints)
	OrderEndpoints(sorted, order)
	return slices.EqualFunc(sorted, endpoints, func(a, b v1alpha1.Endpoint) bool { return a.Name == b.Name })
}

func compareEndpoints(a, b v1alpha1.Endpoint) int { return strings.Compare(a.Name, b.Name) }
