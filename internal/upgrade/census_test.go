package upgrade

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/widgetry/widget-operator/internal/census"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
)

// TestOldManifestsCheck: the census refuses while a release declares the old version, naming
// the command per release; without the RBAC to read Helm's records, or without a census, it
// warns and names the command to run by hand; an override passes, recorded as an event.
func TestOldManifestsCheck(t *testing.T) {
	ctx := context.Background()
	cfg := WidgetConfig()
	live := &apiextensionsv1.CustomResourceDefinition{}
	live.Name, live.Spec.Group, live.Spec.Names.Kind, live.Spec.Names.Plural = crd.WidgetName, "widgetry.io", "Widget", "widgets"
	found := []census.Finding{
		{Driver: "Secret", Namespace: "shop", Release: "shop", Revision: 3, Status: "deployed", Objects: []string{"shop/web (shop/templates/widget.yaml)"}},
		{Driver: "Secret", Namespace: "shop", Release: "shop", Revision: 2, Status: "superseded", Objects: []string{"shop/web (shop/templates/widget.yaml)"}},
	}
	var asked string
	withFound := func(apiVersion, kind string) ([]census.Finding, error) {
		asked = apiVersion + " " + kind
		return found, nil
	}
	forbidden := func(string, string) ([]census.Finding, error) {
		return nil, errors.Join(errors.New("list: failed to list"), apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("no")))
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()

	_, err := oldManifests(ctx, Clients{Client: c, Census: withFound}, cfg, live, crd.StageUnserve)
	if err == nil || !strings.Contains(err.Error(), "2 Helm release revision(s) declare widgets through v1alpha1") || strings.Count(err.Error(), "widgetctl migrate-release shop -n shop") != 1 {
		t.Errorf("with releases found: %v", err)
	}
	if asked != "widgetry.io/v1alpha1 Widget" {
		t.Errorf("the census was asked for %q", asked)
	}
	for name, cl := range map[string]Clients{"forbidden": {Client: c, Census: forbidden}, "no census": {Client: c}} {
		note, err := oldManifests(ctx, cl, cfg, live, crd.StageRemove)
		if err != nil || !strings.HasPrefix(note, "WARNING: ") || !strings.Contains(note, "kubectl widget census") {
			t.Errorf("%s: note %q, %v", name, note, err)
		}
	}
	note, err := oldManifests(ctx, Clients{Client: c, Census: withFound, AllowOldManifestsReason: "INC-9"}, cfg, live, crd.StageUnserve)
	if err != nil || !strings.HasPrefix(note, `overridden ("INC-9")`) {
		t.Errorf("overridden: %q %v", note, err)
	}
	events := &corev1.EventList{}
	if err := c.List(ctx, events); err != nil || len(events.Items) != 1 || events.Items[0].Reason != "OldReleaseManifestsOverridden" {
		t.Errorf("the override's event: %+v %v", events.Items, err)
	}
}
