package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func admissionRequest(version, object string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "u", Operation: admissionv1.Create,
		Kind:   metav1.GroupVersionKind{Group: "widgetry.io", Version: version, Kind: "Widget"},
		Object: runtime.RawExtension{Raw: []byte(object)},
	}}
}

// updateRequest is an UPDATE by a client of version requested, sent to the webhook as
// version sent (they differ when matchPolicy Equivalent converted it).
func updateRequest(requested, sent, object, old string) admission.Request {
	req := admissionRequest(sent, object)
	req.Operation = admissionv1.Update
	req.RequestKind = &metav1.GroupVersionKind{Group: "widgetry.io", Version: requested, Kind: "Widget"}
	req.OldObject = runtime.RawExtension{Raw: []byte(old)}
	return req
}

// applyPatches applies a mutating response to the object, as the apiserver would.
func applyPatches(t *testing.T, object string, resp admission.Response) string {
	t.Helper()
	if len(resp.Patches) == 0 {
		return object
	}
	raw, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, err := patch.Apply([]byte(object))
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// Stored objects in both versions: paused with an exact timeout of 1.5s, and plain.
const (
	storedPausedV1alpha1 = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","annotations":{"team":"x","widgetry.io/conversion-data":"{\"timeout\":\"1.5s\",\"paused\":true}"}},"spec":{"image":"i:1","replicas":1,"timeoutSeconds":2}}`
	storedPausedV1       = `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a","annotations":{"team":"x"}},"spec":{"image":"i:1","size":1,"timeout":"1.5s","paused":true}}`
	storedPlainV1alpha1  = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","replicas":1,"timeoutSeconds":2}}`
)

// TestDefaulterKeepsWhatV1alpha1CannotExpress: an UPDATE through v1alpha1 keeps spec.paused
// and the exact spec.timeout of the stored object, whichever version the object is sent in,
// and only then; the result is checked on the hub, and the webhook run again on it changes
// nothing more.
func TestDefaulterKeepsWhatV1alpha1CannotExpress(t *testing.T) {
	for _, tc := range []struct {
		name, requested, sent, object, old string
		paused                             bool
		timeout                            string
		unpatched                          bool
	}{
		{name: "replace through v1alpha1 without the annotation keeps both", requested: "v1alpha1", sent: "v1alpha1",
			object: `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","annotations":{"team":"x"}},"spec":{"image":"i:2","replicas":1,"timeoutSeconds":2}}`,
			old:    storedPausedV1alpha1, paused: true, timeout: "1.5s"},
		{name: "no annotations at all", requested: "v1alpha1", sent: "v1alpha1",
			object: `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:2","replicas":1,"timeoutSeconds":2}}`,
			old:    storedPausedV1alpha1, paused: true, timeout: "1.5s"},
		{name: "changed timeoutSeconds replaces the timeout, paused stays", requested: "v1alpha1", sent: "v1alpha1",
			object: `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","replicas":1,"timeoutSeconds":5}}`,
			old:    storedPausedV1alpha1, paused: true, timeout: "5s"},
		{name: "an annotation that says otherwise does not unpause", requested: "v1alpha1", sent: "v1alpha1",
			object: `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","annotations":{"widgetry.io/conversion-data":"{\"timeout\":\"1.5s\"}"}},"spec":{"image":"i:1","replicas":1,"timeoutSeconds":2}}`,
			old:    storedPausedV1alpha1, paused: true, timeout: "1.5s"},
		{name: "a stale annotation on a plain Widget is dropped", requested: "v1alpha1", sent: "v1alpha1",
			object: `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","annotations":{"widgetry.io/conversion-data":"{\"paused\":true}"}},"spec":{"image":"i:1","replicas":1,"timeoutSeconds":2}}`,
			old:    storedPlainV1alpha1, paused: false, timeout: "2s"},
		{name: "the object as read back through v1alpha1 needs nothing", requested: "v1alpha1", sent: "v1alpha1",
			object: storedPausedV1alpha1, old: storedPausedV1alpha1, paused: true, timeout: "1.5s", unpatched: true},
		{name: "a plain Widget needs nothing", requested: "v1alpha1", sent: "v1alpha1",
			object: storedPlainV1alpha1, old: storedPlainV1alpha1, timeout: "2s", unpatched: true},

		{name: "sent as v1: replace without the annotation keeps both", requested: "v1alpha1", sent: "v1",
			object: `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:2","size":1,"timeout":"2s"}}`,
			old:    storedPausedV1, paused: true, timeout: "1.5s"},
		{name: "sent as v1: changed timeoutSeconds replaces the timeout", requested: "v1alpha1", sent: "v1",
			object: `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","size":1,"timeout":"5s"}}`,
			old:    storedPausedV1, paused: true, timeout: "5s"},
		{name: "sent as v1: a paused request on an unpaused Widget is unpaused", requested: "v1alpha1", sent: "v1",
			object: `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","size":1,"timeout":"2s","paused":true}}`,
			old:    `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","size":1,"timeout":"2s"}}`, timeout: "2s"},

		{name: "through v1 nothing is hidden: the client's values stand", requested: "v1", sent: "v1",
			object: `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","size":1,"timeout":"2s"}}`,
			old:    storedPausedV1, timeout: "2s", unpatched: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := Defaulter{}.Handle(context.Background(), updateRequest(tc.requested, tc.sent, tc.object, tc.old))
			if !resp.Allowed {
				t.Fatalf("refused: %+v", resp.Result)
			}
			if tc.unpatched != (len(resp.Patches) == 0) {
				t.Errorf("patches %v, want none: %v", resp.Patches, tc.unpatched)
			}
			patched := applyPatches(t, tc.object, resp)
			got, err := decodeWidget(metav1.GroupVersionKind{Group: "widgetry.io", Version: tc.sent, Kind: "Widget"}, []byte(patched))
			if err != nil {
				t.Fatalf("patched object %s: %v", patched, err)
			}
			if ptr.Deref(got.hub.Spec.Paused, false) != tc.paused || got.hub.Spec.Timeout == nil || *got.hub.Spec.Timeout != tc.timeout {
				t.Errorf("patched object %s reads as paused %v timeout %v, want %v %s", patched, got.hub.Spec.Paused, got.hub.Spec.Timeout, tc.paused, tc.timeout)
			}
			if strings.Contains(tc.object, `"team":"x"`) && !strings.Contains(patched, `"team":"x"`) {
				t.Errorf("patched object %s lost the other annotations", patched)
			}
			again := Defaulter{}.Handle(context.Background(), updateRequest(tc.requested, tc.sent, patched, tc.old))
			if len(again.Patches) != 0 {
				t.Errorf("patching a patched object patches again: %v", again.Patches)
			}
		})
	}
}

func TestDefaulterLeavesOtherRequestsAlone(t *testing.T) {
	object := `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1"}}`
	if resp := (Defaulter{}).Handle(context.Background(), admissionRequest("v1alpha1", object)); !resp.Allowed || len(resp.Patches) != 0 {
		t.Errorf("CREATE: %+v", resp)
	}
	// A stored object conversion cannot read: the update that repairs it must pass.
	broken := `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","annotations":{"widgetry.io/conversion-data":"nonsense"}},"spec":{"image":"i:1","timeoutSeconds":2}}`
	resp := Defaulter{}.Handle(context.Background(), updateRequest("v1alpha1", "v1alpha1", object, broken))
	if !resp.Allowed || len(resp.Patches) != 0 || !strings.Contains(strings.Join(resp.Warnings, ""), "could not be read") {
		t.Errorf("update of an unreadable stored object: %+v", resp)
	}
}

// deleting marks a Widget as being deleted, with finalizers.
func deleting(object string, finalizers ...string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(object), &m); err != nil {
		panic(err)
	}
	meta := m["metadata"].(map[string]any)
	meta["deletionTimestamp"] = "2026-01-02T03:04:05Z"
	meta["finalizers"] = finalizers
	out, _ := json.Marshal(m)
	return string(out)
}

func withFinalizers(object string, finalizers ...string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(object), &m); err != nil {
		panic(err)
	}
	m["metadata"].(map[string]any)["finalizers"] = finalizers
	out, _ := json.Marshal(m)
	return string(out)
}

// The webhook refuses with the request version's field paths; the warnings about legal but
// risky values are the chart's ValidatingAdmissionPolicy's (internal/chart TestWarningsPolicy),
// so here they must not appear twice.
func TestValidatorFieldPathsAndWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, version, object string
		allowed               bool
		want                  []string
	}{
		{"bad image through v1alpha1", "v1alpha1", `{"metadata":{"name":"a"},"spec":{"image":"Bad Image"}}`, false, []string{"spec.image", "not a container image reference"}},
		{"uppercase repository path", "v1", `{"metadata":{"name":"a"},"spec":{"image":"registry.example.com/Team/server:v1"}}`, false, []string{"spec.image", "must be lowercase"}},
		{"a bare image ID", "v1", `{"metadata":{"name":"a"},"spec":{"image":"` + strings.Repeat("a", 64) + `"}}`, false, []string{"spec.image"}},
		{"a digest that is not one", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server@sha256:abc"}}`, false, []string{"spec.image"}},
		{"garbage", "v1", `{"metadata":{"name":"a"},"spec":{"image":"::"}}`, false, []string{"spec.image"}},
		{"size 0 through v1alpha1", "v1alpha1", `{"metadata":{"name":"a"},"spec":{"image":"i:1","replicas":0}}`, true, nil},                    // warned by the chart's policy, not the webhook
		{"size 0 through v1", "v1", `{"metadata":{"name":"a"},"spec":{"image":"i:1","size":0}}`, true, nil},                                    // warned by the chart's policy, not the webhook
		{"no tag", "v1", `{"metadata":{"name":"a"},"spec":{"image":"registry.example.com/team/server"}}`, true, nil},                           // warned by the chart's policy, not the webhook
		{"latest", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server:latest"}}`, true, nil},                                              // warned by the chart's policy, not the webhook
		{"long timeout", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server:1","timeout":"10m"}}`, true, nil},                             // warned by the chart's policy, not the webhook
		{"long timeout through v1alpha1", "v1alpha1", `{"metadata":{"name":"a"},"spec":{"image":"server:1","timeoutSeconds":600}}`, true, nil}, // warned by the chart's policy, not the webhook
		{"digest", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server@sha256:` + strings.Repeat("a", 64) + `"}}`, true, nil},
		{"latest pinned by a digest", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server:latest@sha256:` + strings.Repeat("a", 64) + `"}}`, true, nil},
		{"registry port and tag", "v1", `{"metadata":{"name":"a"},"spec":{"image":"localhost:5000/server:v1.2"}}`, true, nil},
		{"uppercase registry host", "v1alpha1", `{"metadata":{"name":"a"},"spec":{"image":"Registry.Example.com/x:v1"}}`, true, nil},
		{"uppercase tag", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server:V1.2-RC"}}`, true, nil},
		{"two endpoints on one port through v1alpha1", "v1alpha1", `{"metadata":{"name":"a"},"spec":{"image":"i:1","endpoints":[{"name":"http","port":8080},{"name":"web","port":8080}]}}`, false,
			[]string{"spec.endpoints[1].port: Duplicate value: 8080", `endpoint "http" has port 8080 too`}},
		{"two endpoints on one port through v1", "v1", `{"metadata":{"name":"a"},"spec":{"image":"i:1","endpoints":{"http":{"port":8080},"web":{"port":8080}}}}`, false,
			[]string{"spec.endpoints[web].port: Duplicate value: 8080"}},
		{"endpoints on distinct ports", "v1", `{"metadata":{"name":"a"},"spec":{"image":"i:1","endpoints":{"http":{"port":8080},"web":{"port":8081}}}}`, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := Validator{}.Handle(context.Background(), admissionRequest(tc.version, tc.object))
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed %v, want %v: %+v", resp.Allowed, tc.allowed, resp.Result)
			}
			text := strings.Join(resp.Warnings, "\n")
			if resp.Result != nil {
				text += resp.Result.Message
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not mention %q", text, w)
				}
			}
			if tc.want == nil && len(resp.Warnings) > 0 {
				t.Errorf("unexpected warnings %v", resp.Warnings)
			}
		})
	}
}

// TestValidatorRatchets: on UPDATE only what the request changes is checked; an unchanged
// invalid value passes with a warning, and a Widget being deleted can always lose its
// finalizers.
func TestValidatorRatchets(t *testing.T) {
	const (
		legacy  = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"team/Server:v1","replicas":1,"timeoutSeconds":2}}`
		legacy3 = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"team/Server:v1","replicas":3,"timeoutSeconds":2}}`
		fixed   = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"team/server:v1","replicas":1,"timeoutSeconds":2}}`
		// broken cannot even be decoded: its conversion data is not JSON.
		broken        = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","annotations":{"widgetry.io/conversion-data":"nonsense"}},"spec":{"image":"i:1","replicas":1,"timeoutSeconds":2}}`
		brokenBig     = `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a","annotations":{"widgetry.io/conversion-data":"nonsense"}},"spec":{"image":"i:1","replicas":3,"timeoutSeconds":2}}`
		badTimeout    = `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","timeout":"1 second"}}`
		badTimeout2   = `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","timeout":"2 seconds"}}`
		badTimeoutP   = `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","timeout":"1 second","paused":true}}`
		cleanup       = "widgetry.io/catalog-cleanup"
		dupPorts      = `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","endpoints":{"a":{"port":8080},"b":{"port":8080}}}}`
		dupPorts2     = `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:2","endpoints":{"a":{"port":8080},"b":{"port":8080}}}}`
		distinctPorts = `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","endpoints":{"a":{"port":8080},"b":{"port":8081}}}}`
	)
	for _, tc := range []struct {
		name, version, object, old string
		allowed                    bool
		want                       string // in the warnings or the refusal
	}{
		{"unchanged invalid image, other field changed", "v1alpha1", legacy3, legacy, true, "admitted because this update does not change it"},
		{"unchanged invalid image, finalizer added", "v1alpha1", withFinalizers(legacy, cleanup), legacy, true, "admitted because this update does not change it"},
		{"invalid image changed to another invalid one", "v1alpha1", strings.Replace(legacy, "Server", "SERVER", 1), legacy, false, "spec.image"},
		{"invalid image fixed", "v1alpha1", fixed, legacy, true, ""},
		{"valid image made invalid", "v1alpha1", legacy, fixed, false, "must be lowercase"},
		{"unchanged invalid timeout", "v1", badTimeoutP, badTimeout, true, "admitted because this update does not change it"},
		{"invalid timeout changed to another invalid one", "v1", badTimeout2, badTimeout, false, "spec.timeout"},
		{"unchanged duplicate ports, image changed", "v1", dupPorts2, dupPorts, true, "admitted because this update does not change it"},
		{"duplicate ports made", "v1", dupPorts, distinctPorts, false, "Duplicate value: 8080"},

		{"finalizer removed from a deleting Widget with an invalid image", "v1alpha1", deleting(legacy), deleting(legacy, cleanup), true, ""},
		{"finalizer removed from a deleting Widget conversion cannot read", "v1alpha1", deleting(broken, "a"), deleting(broken, "a", cleanup), true, ""},
		{"finalizer removed from a Widget conversion cannot read, not deleting", "v1alpha1", withFinalizers(broken), withFinalizers(broken, cleanup), false, "conversion data"},
		{"finalizer removed and spec changed while deleting", "v1alpha1", deleting(brokenBig), deleting(broken, cleanup), false, "conversion data"},
		{"finalizer added while deleting", "v1alpha1", deleting(broken, cleanup, "b"), deleting(broken, cleanup), false, "conversion data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := Validator{}.Handle(context.Background(), updateRequest(tc.version, tc.version, tc.object, tc.old))
			if resp.Allowed != tc.allowed {
				t.Fatalf("allowed %v, want %v: %+v", resp.Allowed, tc.allowed, resp.Result)
			}
			text := strings.Join(resp.Warnings, "\n")
			if resp.Result != nil {
				text += resp.Result.Message
			}
			if !strings.Contains(text, tc.want) {
				t.Errorf("%q does not mention %q", text, tc.want)
			}
			if tc.allowed {
				// The mutating webhook must not stand in the way either.
				if m := (Defaulter{}).Handle(context.Background(), updateRequest(tc.version, tc.version, tc.object, tc.old)); !m.Allowed {
					t.Errorf("the mutating webhook refuses: %+v", m.Result)
				}
			}
		})
	}
}
