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
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

func admissionRequest(version, object string) admission.Request {
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "u", Operation: admissionv1.Create,
		Kind:   metav1.GroupVersionKind{Group: "widgetry.io", Version: version, Kind: "Widget"},
		Object: runtime.RawExtension{Raw: []byte(object)},
	}}
}

// applyPatches applies a defaulting response to the object, as the apiserver would.
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

func TestDefaulterIsIdempotentInBothVersions(t *testing.T) {
	for _, tc := range []struct {
		version, object string
		want            []string
	}{
		{"v1alpha1", `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1"}}`, []string{`"replicas":1`, `"timeoutSeconds":30`}},
		{"v1", `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1"}}`, []string{`"size":1`, `"timeout":"30s"`}},
		{"v1", `{"apiVersion":"widgetry.io/v1","kind":"Widget","metadata":{"name":"a"}}`, []string{`"spec":{`, `"size":1`}},
		{"v1alpha1", `{"apiVersion":"widgetry.io/v1alpha1","kind":"Widget","metadata":{"name":"a"},"spec":{"image":"i:1","replicas":0,"timeoutSeconds":5}}`, []string{`"replicas":0`, `"timeoutSeconds":5`}},
	} {
		first := Defaulter{}.Handle(context.Background(), admissionRequest(tc.version, tc.object))
		if !first.Allowed {
			t.Fatalf("%s: refused: %+v", tc.object, first.Result)
		}
		defaulted := applyPatches(t, tc.object, first)
		for _, w := range tc.want {
			if !strings.Contains(defaulted, w) {
				t.Errorf("%s: defaulted object %s lacks %s", tc.version, defaulted, w)
			}
		}
		again := Defaulter{}.Handle(context.Background(), admissionRequest(tc.version, defaulted))
		if len(again.Patches) != 0 {
			t.Errorf("%s: defaulting a defaulted object patches again: %v", tc.version, again.Patches)
		}
	}
}

func TestValidatorFieldPathsAndWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, version, object string
		allowed               bool
		want                  []string
	}{
		{"bad image through v1alpha1", "v1alpha1", `{"metadata":{"name":"a"},"spec":{"image":"Bad Image"}}`, false, []string{"spec.image", "not a container image reference"}},
		{"size 0 warns with the version's field name", "v1alpha1", `{"metadata":{"name":"a"},"spec":{"image":"i:1","replicas":0}}`, true, []string{"spec.replicas is 0"}},
		{"size 0 through v1", "v1", `{"metadata":{"name":"a"},"spec":{"image":"i:1","size":0}}`, true, []string{"spec.size is 0"}},
		{"no tag", "v1", `{"metadata":{"name":"a"},"spec":{"image":"registry.example.com/team/server"}}`, true, []string{"has no tag"}},
		{"latest", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server:latest"}}`, true, []string{"uses the :latest tag"}},
		{"long timeout", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server:1","timeout":"10m"}}`, true, []string{"spec.timeout is 10m"}},
		{"long timeout through v1alpha1", "v1alpha1", `{"metadata":{"name":"a"},"spec":{"image":"server:1","timeoutSeconds":600}}`, true, []string{"spec.timeoutSeconds is 10m0s"}},
		{"digest", "v1", `{"metadata":{"name":"a"},"spec":{"image":"server@sha256:` + strings.Repeat("a", 64) + `"}}`, true, nil},
		{"registry port and tag", "v1", `{"metadata":{"name":"a"},"spec":{"image":"localhost:5000/server:v1.2"}}`, true, nil},
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
