package upgrade

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/fielddiff"
	"github.com/widgetry/widget-operator/internal/webhook"
)

// Config names the CRD and the version pair an upgrade moves between.
type Config struct {
	// CRD is the CustomResourceDefinition's name.
	CRD string
	// Old is the version being retired (the installed base), New the one replacing it.
	Old, New string
	// VersionTemplate returns the definition (schema, subresources, columns) of a version the
	// live CRD lacks, New for add-version and Old for the way back from remove; nil when the
	// engine cannot add versions (then the user adds the schema and the engine only flips
	// flags).
	VersionTemplate func(name string) *apiextensionsv1.CustomResourceDefinitionVersion
	// DeprecationWarning is set on Old from add-version on; empty: the apiserver's default.
	DeprecationWarning string
	// ProbeObject returns an object of version Old for the conversion probe (apiVersion,
	// kind and metadata are set by the engine).
	ProbeObject func() map[string]any
	// NewProbeObject returns an object of version New for the reverse probe, with the fields
	// only New can express set (they must survive New -> Old -> New); nil skips it.
	NewProbeObject func() map[string]any
	// BuildConverter is the conversion webhook compiled into this binary, for the same-stage
	// check of a new build; nil skips that check.
	BuildConverter http.Handler
	// DryRunObject returns an object of version New for the server-side dry-run create of
	// the flip-storage preflight; nil skips that check (the GETs still run).
	DryRunObject func(namespace string) *unstructured.Unstructured
	// OwnerResources are the resources whose owner references must not name Old before it
	// stops being served: the garbage collector cannot resolve an unserved version.
	OwnerResources []schema.GroupVersionResource
	// CompareVersions checks that one object read through several versions (keyed by
	// version) holds the same data; nil compares nothing beyond identity.
	CompareVersions func(objs map[string]*unstructured.Unstructured) error
	// RunbookDir is where the upgrade runbook pages are, "runbooks/upgrade".
	RunbookDir string
}

func (c Config) pair() crd.VersionPair {
	return crd.VersionPair{Old: c.Old, New: c.New, Template: c.VersionTemplate, DeprecationWarning: c.DeprecationWarning}
}

// Runbook returns the runbook page of a stage.
func (c Config) Runbook(s crd.Stage) string {
	return fmt.Sprintf("%s/%s.md", c.RunbookDir, s)
}

// WidgetConfig is the Config of the Widget API: v1alpha1 to v1.
func WidgetConfig() Config {
	return Config{
		CRD: crd.WidgetName, Old: "v1alpha1", New: "v1",
		VersionTemplate:    crd.WidgetPair().Template,
		DeprecationWarning: crd.DeprecationWarning,
		ProbeObject: func() map[string]any {
			return map[string]any{"spec": map[string]any{
				"image": "registry.example.com/widgetctl/probe:v1", "replicas": int64(0), "timeoutSeconds": int64(2),
				"endpoints": []any{map[string]any{"name": "a", "port": int64(1)}, map[string]any{"name": "b", "port": int64(65535)}},
			}}
		},
		NewProbeObject: func() map[string]any {
			return map[string]any{"spec": map[string]any{
				"image": "registry.example.com/widgetctl/probe:v1", "size": int64(0), "timeout": "1.5s", "paused": true,
				"endpoints": map[string]any{"a": map[string]any{"port": int64(1)}, "b": map[string]any{"port": int64(65535)}},
			}}
		},
		BuildConverter: &webhook.ConversionHandler{},
		DryRunObject: func(namespace string) *unstructured.Unstructured {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "widgetry.io/v1", "kind": "Widget",
				"metadata": map[string]any{"generateName": "widgetctl-preflight-", "namespace": namespace},
				"spec":     map[string]any{"image": "registry.example.com/widgetctl/probe:v1", "size": int64(0), "timeout": "1.5s", "paused": true},
			}}
			return u
		},
		OwnerResources: []schema.GroupVersionResource{
			{Group: "apps", Version: "v1", Resource: "deployments"},
			{Version: "v1", Resource: "services"},
		},
		CompareVersions: compareWidgetVersions,
		RunbookDir:      "runbooks/upgrade",
	}
}

// compareWidgetVersions checks that a Widget read through v1alpha1 converts to exactly what
// v1 returned, and back to exactly what v1alpha1 returned. Exactly: field by field, a missing
// list is not an empty one (fielddiff), which equality.Semantic would let pass.
func compareWidgetVersions(objs map[string]*unstructured.Unstructured) error {
	alphaU, hubU := objs["v1alpha1"], objs["v1"]
	if alphaU == nil || hubU == nil {
		return nil
	}
	alpha, hub := &v1alpha1.Widget{}, &v1.Widget{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(alphaU.Object, alpha); err != nil {
		return fmt.Errorf("decode v1alpha1: %w", err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(hubU.Object, hub); err != nil {
		return fmt.Errorf("decode v1: %w", err)
	}
	converted := &v1.Widget{}
	if err := conversion.ConvertWidgetToHub(context.Background(), alpha.DeepCopy(), converted); err != nil {
		return err
	}
	if d := diff(map[string]any{"spec": converted.Spec, "status": converted.Status}, map[string]any{"spec": hub.Spec, "status": hub.Status}); d != "" {
		return fmt.Errorf("the v1alpha1 read, converted to v1, differs from the v1 read: %s", d)
	}
	back := &v1alpha1.Widget{}
	if err := conversion.ConvertWidgetFromHub(context.Background(), hub, back); err != nil {
		return err
	}
	if d := diff(map[string]any{"spec": back.Spec, "conversionData": back.Annotations[conversion.DataAnnotation]},
		map[string]any{"spec": alpha.Spec, "conversionData": alpha.Annotations[conversion.DataAnnotation]}); d != "" {
		return fmt.Errorf("the v1 read, converted to v1alpha1, differs from the v1alpha1 read: %s", d)
	}
	return nil
}

// diff is fielddiff.Of, its paths joined ("" when equal).
func diff(a, b any) string {
	d, err := fielddiff.Of(a, b)
	if err != nil {
		return err.Error()
	}
	return strings.Join(d, "; ")
}
