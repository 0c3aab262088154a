//go:build envtest

package chart

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"github.com/widgetry/widget-operator/internal/crd"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// TestCRDEveryStage renders the chart at every stage with Helm 3 and Helm 4 and compares the
// CRD with the one encoding of the stage table, crd.ApplyStageFlags, plus the conversion
// webhook: the whole spec, not only the flags.
func TestCRDEveryStage(t *testing.T) {
	for name, helm := range helms(t) {
		for _, stage := range crd.Stages {
			t.Run(name+"/"+string(stage), func(t *testing.T) {
				out, err := helmtemplate.Render(helmtemplate.Options{Helm: helm, Chart: chartDir, Values: map[string]any{"apiUpgrade": map[string]any{"stage": string(stage)}}})
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(out), "caBundle:") {
					t.Error("the chart renders caBundle, which cainjector owns")
				}
				objs, err := helmtemplate.Parse(out)
				if err != nil {
					t.Fatal(err)
				}
				u := objs.Get("CustomResourceDefinition", crd.WidgetName)
				if u == nil {
					t.Fatal("no Widget CRD rendered")
				}
				got := &apiextensionsv1.CustomResourceDefinition{}
				if err := helmtemplate.Into(u, got); err != nil {
					t.Fatal(err)
				}
				want := crd.Widget()
				if err := crd.ApplyStageFlags(want, stage); err != nil {
					t.Fatal(err)
				}
				crd.WithWebhookConversion(want, apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{
					Namespace: "widget-system", Name: "widget-operator-webhook", Path: ptr.To("/convert"), Port: ptr.To[int32](443)}})
				if !equality.Semantic.DeepEqual(want.Spec, got.Spec) {
					t.Errorf("rendered CRD spec differs from crd.ApplyStageFlags(%s) (-want +got):\n%s", stage, cmp.Diff(want.Spec, got.Spec))
				}
				ann := got.Annotations
				if ann["helm.sh/resource-policy"] != "keep" || ann["cert-manager.io/inject-ca-from-secret"] != "widget-system/widget-operator-ca-bundle" {
					t.Errorf("annotations: %v", ann)
				}
			})
		}
	}
}
