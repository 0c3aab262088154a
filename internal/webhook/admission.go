package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"time"

	"github.com/distribution/reference"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
)

// Paths of the admission webhooks on the manager's webhook server (the chart's webhook
// configurations and the dashboards use them).
const (
	MutatePath   = "/mutate-widgetry-io-widget"
	ValidatePath = "/validate-widgetry-io-widget"
	ConvertPath  = "/convert"
)

// admissionObject is a Widget decoded from an AdmissionReview in the version it was sent in
// and converted to the hub, which the checks work on.
type admissionObject struct {
	version string
	hub     *v1.Widget
	spoke   *v1alpha1.Widget // set for objects sent as v1alpha1
}

// decodeAdmissionObject decodes the request's object.
func decodeAdmissionObject(req admission.Request) (*admissionObject, error) {
	return decodeWidget(req.Kind, req.Object.Raw)
}

// decodeWidget decodes raw, an object of kind (the version the apiserver sent it in, which
// with matchPolicy Equivalent need not be the version the client used).
func decodeWidget(kind metav1.GroupVersionKind, raw []byte) (*admissionObject, error) {
	if kind.Group != v1.GroupVersion.Group || kind.Kind != widgetKind {
		return nil, fmt.Errorf("this webhook admits %s Widgets, not %s", v1.GroupVersion.Group, kind)
	}
	switch kind.Version {
	case v1.GroupVersion.Version:
		hub := &v1.Widget{}
		if err := json.Unmarshal(raw, hub); err != nil {
			return nil, fmt.Errorf("decode v1 Widget: %w", err)
		}
		return &admissionObject{version: kind.Version, hub: hub}, nil
	case v1alpha1.GroupVersion.Version:
		spoke := &v1alpha1.Widget{}
		if err := json.Unmarshal(raw, spoke); err != nil {
			return nil, fmt.Errorf("decode v1alpha1 Widget: %w", err)
		}
		hub := &v1.Widget{}
		if err := conversion.ConvertWidgetToHub(context.Background(), spoke.DeepCopy(), hub); err != nil {
			return nil, err
		}
		return &admissionObject{version: kind.Version, hub: hub, spoke: spoke}, nil
	}
	return nil, fmt.Errorf("widget version %q is not supported (v1alpha1, v1)", kind.Version)
}

// Validator is the validating webhook: it refuses what the schema cannot express, with field
// paths in the request version's terms, and warns about risky but legal input.
//
// Its checks ratchet: on UPDATE only the fields the request changes are checked, so an object
// stored while the webhooks were absent, or before a check was tightened, stays writable
// (its controller can still add and remove its finalizer, status and metadata can change)
// and is refused only when someone changes the invalid field to another invalid value.
type Validator struct{}

// Handle implements admission.Handler.
func (Validator) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return admission.Allowed("")
	}
	// Before anything is decoded: an object whose stored form this webhook cannot even read
	// (a broken conversion-data annotation) must still be able to go away.
	if req.Operation == admissionv1.Update && onlyRemovesFinalizersWhileDeleting(req) {
		return admission.Allowed("only finalizers removed from a Widget being deleted")
	}
	obj, err := decodeAdmissionObject(req)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	var old *admissionObject
	if req.Operation == admissionv1.Update {
		// An old object that cannot be decoded leaves old nil: every field is checked, as on
		// CREATE, which is stricter, never looser.
		old, _ = decodeWidget(req.Kind, req.OldObject.Raw)
	}
	errs, warnings := validateWidget(obj, old)
	if len(errs) > 0 {
		invalid := apierrors.NewInvalid(schema.GroupKind{Group: v1.GroupVersion.Group, Kind: widgetKind}, obj.hub.Name, errs)
		resp := admission.Response{AdmissionResponse: admissionv1.AdmissionResponse{Allowed: false, Result: &invalid.ErrStatus}}
		return resp.WithWarnings(warnings...)
	}
	return admission.Allowed("").WithWarnings(warnings...)
}

// onlyRemovesFinalizersWhileDeleting reports whether an UPDATE of an object being deleted
// changes nothing but removing finalizers. Such an update is always admitted: refusing it
// would keep the object forever, whatever is wrong with it. The comparison is on the raw
// JSON, member by member, so it holds for objects the typed decoding would refuse, and decodes
// nothing but the finalizers (a map of the whole object would cost tens of times its size).
// The apiserver encodes object and oldObject alike, so equal members are equal bytes; a
// member that differs only in form makes the answer false, which is stricter, never looser.
// resourceVersion (a client may send none) and managedFields (the apiserver updates them for
// this very write) are not the request's changes.
func onlyRemovesFinalizersWhileDeleting(req admission.Request) bool {
	obj, old := req.Object.Raw, req.OldObject.Raw
	oldMeta, err1 := memberValue(old, `"metadata"`)
	meta, err2 := memberValue(obj, `"metadata"`)
	if err1 != nil || err2 != nil || oldMeta == nil || meta == nil {
		return false
	}
	if ts, _ := memberValue(oldMeta, `"deletionTimestamp"`); ts == nil || string(ts) == "null" {
		return false
	}
	kept, okKept := finalizersOf(meta)
	had, okHad := finalizersOf(oldMeta)
	if !okKept || !okHad || len(kept) >= len(had) || !isSubsequence(kept, had) {
		return false
	}
	ignored := map[string]bool{`"finalizers"`: true, `"resourceVersion"`: true, `"managedFields"`: true}
	return sameMembers(obj, old, map[string]bool{`"metadata"`: true}) && sameMembers(meta, oldMeta, ignored)
}

// finalizersOf decodes metadata.finalizers alone.
func finalizersOf(metadata []byte) ([]string, bool) {
	raw, err := memberValue(metadata, `"finalizers"`)
	if err != nil {
		return nil, false
	}
	var finalizers []string
	if raw != nil && json.Unmarshal(raw, &finalizers) != nil {
		return nil, false
	}
	return finalizers, true
}

// sameMembers reports whether objects a and b have the same members with the same bytes,
// apart from the keys in ignore.
func sameMembers(a, b []byte, ignore map[string]bool) bool {
	members := func(raw []byte) (map[string][]byte, bool) {
		m := map[string][]byte{}
		err := eachMember(raw, func(mb member) bool {
			if !ignore[string(mb.key)] {
				m[string(mb.key)] = mb.value
			}
			return true
		})
		return m, err == nil
	}
	ma, okA := members(a)
	mb, okB := members(b)
	if !okA || !okB || len(ma) != len(mb) {
		return false
	}
	for k, v := range ma {
		if w, ok := mb[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// isSubsequence reports whether sub is seq with some elements removed, order kept.
func isSubsequence(sub, seq []string) bool {
	for _, s := range sub {
		i := slices.Index(seq, s)
		if i < 0 {
			return false
		}
		seq = seq[i+1:]
	}
	return true
}

// validateWidget checks the hub and names fields as the request version does. old is the
// stored object on UPDATE (nil on CREATE): a field it already holds is not checked again,
// only warned about.
func validateWidget(obj, old *admissionObject) (field.ErrorList, []string) {
	spec := field.NewPath("spec")
	timeoutPath := spec.Child("timeout")
	if obj.spoke != nil {
		timeoutPath = spec.Child("timeoutSeconds")
	}
	w := obj.hub
	var errs field.ErrorList
	var warnings []string
	// refuse refuses a changed field and only warns about an unchanged one (the ratchet).
	refuse := func(changed bool, err *field.Error) {
		if changed {
			errs = append(errs, err)
			return
		}
		warnings = append(warnings, fmt.Sprintf("%s; admitted because this update does not change it, but the next change of it must fix it", err.Error()))
	}

	image := w.Spec.Image
	imageChanged := old == nil || old.hub.Spec.Image != image
	_, err := parseImage(image)
	switch {
	case image == "":
		refuse(imageChanged, field.Required(spec.Child("image"), "set the container image, e.g. registry.example.com/team/server:v1.2.3"))
	case err != nil:
		refuse(imageChanged, field.Invalid(spec.Child("image"), image, fmt.Sprintf("not a container image reference (%v); the kubelet would refuse to pull it", err)))
	}
	// Each endpoint is a port of the Widget's container and of its Service, where the
	// apiserver refuses a port listed twice: the controller could never apply such a Widget.
	portsChanged := old == nil || !reflect.DeepEqual(old.hub.Spec.Endpoints, w.Spec.Endpoints)
	byPort := map[int32]string{}
	for _, name := range slices.Sorted(maps.Keys(w.Spec.Endpoints)) {
		port := w.Spec.Endpoints[name].Port
		if other, taken := byPort[port]; taken {
			err := field.Duplicate(endpointPortPath(obj, name), port)
			err.Detail = fmt.Sprintf("endpoint %q has port %d too; the Widget's container and Service cannot list a port twice", other, port)
			refuse(portsChanged, err)
			continue
		}
		byPort[port] = name
	}
	// The warnings about legal but risky values (no tag, :latest, no pods, a long timeout)
	// are the chart's ValidatingAdmissionPolicy widgets.widgetry.io-warnings: the apiserver
	// computes them with our pods gone too.
	if w.Spec.Timeout != nil {
		timeoutChanged := old == nil || old.hub.Spec.Timeout == nil || *old.hub.Spec.Timeout != *w.Spec.Timeout
		if _, err := time.ParseDuration(*w.Spec.Timeout); err != nil {
			refuse(timeoutChanged, field.Invalid(timeoutPath, *w.Spec.Timeout, "not a Go duration such as 30s or 1m30s"))
		}
	}
	return errs, warnings
}

// endpointPortPath names an endpoint's port as the request version does: v1alpha1 lists
// endpoints, v1 maps them by name.
func endpointPortPath(obj *admissionObject, name string) *field.Path {
	endpoints := field.NewPath("spec", "endpoints")
	if obj.spoke != nil {
		for i, e := range obj.spoke.Spec.Endpoints {
			if e.Name == name {
				return endpoints.Index(i).Child("port")
			}
		}
	}
	return endpoints.Key(name).Child("port")
}

// parseImage parses an image reference with the grammar the kubelet applies before it pulls
// (k8s.io/kubernetes pkg/util/parsers.ParseImageName: reference.ParseNormalizedNamed; containerd's
// CRI normalizes with the same function): a registry host may have uppercase letters
// (Registry.Example.com/x:v1), the repository path may not; a bare 64-hex image ID is refused.
func parseImage(image string) (reference.Named, error) {
	return reference.ParseNormalizedNamed(image)
}
