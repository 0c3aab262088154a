// Package conversiontest makes Widgets for conversion tests and benchmarks: random objects in
// the domain the CRD schema admits (for round-trip fuzzing) and realistic ones (for
// benchmarks and end-to-end checks), plus the strict comparison every round trip uses.
package conversiontest

import (
	"fmt"
	"maps"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/randfill"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
)

// MaxTimeoutSeconds is the schema's upper bound for timeoutSeconds (24h).
const MaxTimeoutSeconds = 86400

// NewFiller returns a randfill.Filler whose Widgets stay inside the CRD schema's domain
// (conversion is only lossless where both versions can hold the value; see the
// documentation of package internal/conversion):
// timeouts positive and at most 24h, endpoint lists with unique names in any order,
// annotations either absent or non-empty, a conversion-data annotation on spokes only in the
// canonical form the converter writes (an endpoint order in it only one the list follows, as
// conversion from v1 leaves it), and on hubs an endpoint-order annotation of any kind: the
// exact order of a v1alpha1 list, a stale one, the sorted order, empty.
func NewFiller(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 4).Funcs(
		func(w *v1alpha1.Widget, c randfill.Continue) {
			c.FillNoCustom(w)
			w.Annotations = withoutDataKey(w.Annotations)
			normalizeMeta(&w.ObjectMeta)
			w.Spec.Replicas = randomCount(c.Rand, w.Spec.Replicas)
			if w.Spec.TimeoutSeconds != nil {
				n := int32(c.Intn(MaxTimeoutSeconds) + 1)
				w.Spec.TimeoutSeconds = &n
			}
			for i := range w.Spec.Endpoints {
				w.Spec.Endpoints[i].Name = dnsLabel(c.Rand)
			}
			w.Spec.Endpoints = shuffledUnique(c.Rand, w.Spec.Endpoints)
			var data conversion.RestoreData
			if c.Intn(4) == 0 {
				// A kept order the list follows: its names, in its order, and one it lacks.
				order := conversion.EndpointOrder(w.Spec.Endpoints)
				if order == "" {
					order = namesOf(w.Spec.Endpoints)
				}
				order += ",gone"
				data.EndpointOrder = &order
			}
			if c.Bool() {
				data.Paused = ptr.To(c.Bool()) // set, true or false
			}
			if w.Spec.TimeoutSeconds != nil && c.Bool() {
				if exact, ok := nonCanonicalTimeout(c.Rand, *w.Spec.TimeoutSeconds); ok {
					data.Timeout = &exact
				}
			}
			w.Annotations = conversion.WithRestoreData(w.Annotations, data)
		},
		func(w *v1.Widget, c randfill.Continue) {
			c.FillNoCustom(w)
			w.Annotations = withoutDataKey(w.Annotations)
			normalizeMeta(&w.ObjectMeta)
			w.Spec.Size = randomCount(c.Rand, w.Spec.Size)
			if w.Spec.Timeout != nil {
				t := RandomTimeout(c.Rand)
				w.Spec.Timeout = &t
			}
			if w.Spec.Endpoints != nil {
				named := make(map[string]v1.EndpointSpec, len(w.Spec.Endpoints))
				for _, e := range w.Spec.Endpoints {
					named[dnsLabel(c.Rand)] = e
				}
				w.Spec.Endpoints = named
			}
			if order, ok := randomEndpointOrder(c.Rand, w.Spec.Endpoints); ok {
				if w.Annotations == nil {
					w.Annotations = map[string]string{}
				}
				w.Annotations[conversion.EndpointOrderAnnotation] = order
			}
		},
		func(fields *metav1.FieldsV1, c randfill.Continue) {
			// managedFields hold JSON; random bytes would not survive an encode.
			fields.SetRawBytes(fmt.Appendf(nil, `{"f:spec":{"f:image":{}},"f:metadata":{"f:labels":{"f:k%d":{}}}}`, c.Intn(100)))
		},
		func(c *metav1.Condition, f randfill.Continue) {
			f.FillNoCustom(c)
			c.LastTransitionTime = metav1.Unix(f.Int63n(1<<32), 0)
		},
	)
}

// randomCount keeps unset as unset and otherwise returns a schema-valid count, an explicit
// zero one time in four (zero and unset must stay apart).
func randomCount(r *rand.Rand, p *int32) *int32 {
	if p == nil {
		return nil
	}
	n := int32(0)
	if r.Intn(4) > 0 {
		n = r.Int31n(1000)
	}
	return &n
}

// RandomTimeout returns a valid v1 timeout in one of the forms users write: canonical
// ("1m30s"), fractional ("1.5s", "250ms"), or non-canonical whole units ("90s", "1m", "2h").
func RandomTimeout(r *rand.Rand) string {
	switch r.Intn(4) {
	case 0:
		return (time.Duration(r.Intn(MaxTimeoutSeconds)+1) * time.Second).String()
	case 1:
		return (time.Duration(r.Int63n(int64(24*time.Hour))) + 1).String()
	case 2:
		return fmt.Sprintf("%ds", r.Intn(MaxTimeoutSeconds)+1)
	default:
		units := []struct {
			suffix string
			max    int
		}{{"ms", 86400000}, {"m", 1440}, {"h", 24}}
		u := units[r.Intn(len(units))]
		return fmt.Sprintf("%d%s", r.Intn(u.max)+1, u.suffix)
	}
}

// nonCanonicalTimeout returns a duration that rounds up to seconds but is not written the
// way time.Duration.String() writes those seconds, as a v1 client could have set it.
func nonCanonicalTimeout(r *rand.Rand, seconds int32) (string, bool) {
	var s string
	if r.Intn(2) == 0 {
		s = (time.Duration(seconds-1)*time.Second + time.Duration(r.Int63n(int64(time.Second-1))+1)).String()
	} else {
		s = fmt.Sprintf("%ds", seconds)
	}
	return s, s != (time.Duration(seconds) * time.Second).String()
}

// shuffledUnique drops repeated names and puts the list in a random order (sorted one time
// in four, the order v1alpha1 gets back from the map alone).
func shuffledUnique(r *rand.Rand, in []v1alpha1.Endpoint) []v1alpha1.Endpoint {
	if in == nil {
		return nil
	}
	out := make([]v1alpha1.Endpoint, 0, len(in))
	seen := map[string]bool{}
	for _, e := range in {
		if !seen[e.Name] {
			seen[e.Name] = true
			out = append(out, e)
		}
	}
	if r.Intn(4) == 0 {
		slices.SortFunc(out, func(a, b v1alpha1.Endpoint) int { return strings.Compare(a.Name, b.Name) })
	} else {
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}

// dnsLabel returns an endpoint name the schemas admit (a DNS label), from a small alphabet so
// that names collide now and then.
func dnsLabel(r *rand.Rand) string {
	const alnum = "abcz09"
	n := 1 + r.Intn(6)
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[r.Intn(len(alnum))]
		if i > 0 && i < n-1 && r.Intn(5) == 0 {
			b[i] = '-'
		}
	}
	return string(b)
}

func namesOf(endpoints []v1alpha1.Endpoint) string {
	names := make([]string, len(endpoints))
	for i, e := range endpoints {
		names[i] = e.Name
	}
	return strings.Join(names, ",")
}

// randomEndpointOrder returns, half the time, an endpoint-order annotation for a hub's map:
// the exact order of a v1alpha1 list, a stale one (a name gone, one missing), the sorted
// order (which conversion never writes) or empty.
func randomEndpointOrder(r *rand.Rand, endpoints map[string]v1.EndpointSpec) (string, bool) {
	if r.Intn(2) == 0 {
		return "", false
	}
	names := slices.Sorted(maps.Keys(endpoints))
	switch r.Intn(4) {
	case 0:
		r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	case 1:
		r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		if len(names) > 0 {
			names = names[1:]
		}
		names = append(names, "gone")
	case 2:
		// sorted
	default:
		return "", true
	}
	return strings.Join(names, ","), true
}

func withoutDataKey(m map[string]string) map[string]string {
	delete(m, conversion.DataAnnotation)
	return m
}

// normalizeMeta makes empty annotation maps nil: JSON (omitempty) cannot tell them apart, so
// neither the apiserver nor the converter can keep the difference.
func normalizeMeta(m *metav1.ObjectMeta) {
	if len(m.Annotations) == 0 {
		m.Annotations = nil
	}
}

// Diff compares want and got strictly (nil and empty differ) and semantically
// (apiequality.Semantic, which treats them as equal and compares quantities and times by
// value). It returns "" when both agree the objects are equal, else a readable diff.
func Diff(want, got any) string {
	if reflect.DeepEqual(want, got) && apiequality.Semantic.DeepEqual(want, got) {
		return ""
	}
	d := cmp.Diff(want, got, cmpopts.EquateComparable(metav1.Time{}))
	if d == "" {
		d = "objects differ only in nil versus empty values (reflect.DeepEqual)"
	}
	return "(-want +got)\n" + d
}
