package upgrade

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
		{Source: census.SourceHelm, Driver: "Secret", Namespace: "shop", Name: "shop", Revision: 3, Status: "deployed", Objects: []string{"shop/web (shop/templates/widget.yaml)"}},
		{Source: census.SourceHelm, Driver: "Secret", Namespace: "shop", Name: "shop", Revision: 2, Status: "superseded", Objects: []string{"shop/web (shop/templates/widget.yaml)"}},
	}
	var asked string
	withFound := func(apiVersion, kind string) (*census.Result, error) {
		asked = apiVersion + " " + kind
		return &census.Result{Found: found}, nil
	}
	unread := func(string, string) (*census.Result, error) {
		return &census.Result{Found: []census.Finding{}, Unread: []string{"Helm releases (list Secrets and ConfigMaps in every namespace)"}}, nil
	}
	failed := func(string, string) (*census.Result, error) { return nil, errors.New("etcdserver: request timed out") }
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()

	_, err := oldManifests(ctx, Clients{Client: c, Census: withFound}, cfg, live, crd.StageUnserve)
	if err == nil || !strings.Contains(err.Error(), "2 place(s) declare widgets through v1alpha1") || strings.Count(err.Error(), "widgetctl migrate-release shop -n shop") != 1 {
		t.Errorf("with releases found: %v", err)
	}
	if asked != "widgetry.io/v1alpha1 Widget" {
		t.Errorf("the census was asked for %q", asked)
	}
	for name, cl := range map[string]Clients{"unread": {Client: c, Census: unread}, "no census": {Client: c}} {
		note, err := oldManifests(ctx, cl, cfg, live, crd.StageRemove)
		if err != nil || !strings.HasPrefix(note, "WARNING: ") || !strings.Contains(note, "kubectl widget census") {
			t.Errorf("%s: note %q, %v", name, note, err)
		}
	}
	if _, err := oldManifests(ctx, Clients{Client: c, Census: failed}, cfg, live, crd.StageUnserve); err == nil || !strings.Contains(err.Error(), "request timed out") {
		t.Errorf("a census that failed: %v", err)
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
