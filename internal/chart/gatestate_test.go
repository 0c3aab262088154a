//go:build envtest

package chart

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/apitraffic"
	"github.com/widgetry/widget-operator/internal/backup"
	"github.com/widgetry/widget-operator/internal/controller"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/gatestate"
	"github.com/widgetry/widget-operator/internal/migrate"
	"github.com/widgetry/widget-operator/internal/testenv"
)

// The accounts of the chart rendered with helmtemplate's defaults (release widget-operator in
// widget-system), and the forgers.
const (
	gateNS    = "widget-system"
	hooksUser = "system:serviceaccount:widget-system:widget-operator-hooks"
	// The controller plane writes the bundle; the webhook plane, network-facing, writes nothing.
	managerUser  = "system:serviceaccount:widget-system:widget-operator-controller"
	webhookUser  = "system:serviceaccount:widget-system:widget-operator"
	editorUser   = "editor@example.com" // may write ConfigMaps and Secrets in the release namespace
	gateGuard    = "widgets.widgetry.io-gate-state-guard"
	storedGuard  = "widgets.widgetry.io-stored-versions-guard"
	statusWriter = "crd-status-writer" // a ClusterRole that may write CRD status, given to the forger too
	// kube-controller-manager's storage version migrator, with and without
	// --use-service-account-credentials: the in-tree backend's trim.
	svmUser = "system:serviceaccount:kube-system:storage-version-migrator-controller"
	kcmUser = "system:kube-controller-manager"
)

// gateEnv is a real apiserver with the chart's gate-state and stored-versions guards as
// rendered, and a client for each account.
type gateEnv struct {
	t       *testing.T
	env     *testenv.Env
	objs    []client.Object // the rendered policies and bindings
	bundle  string          // the caBundle Secret's name
	clients map[string]client.Client
}

func startGateEnv(t *testing.T) *gateEnv {
	t.Helper()
	g := &gateEnv{t: t, env: testenv.Start(t, testenv.Options{}), clients: map[string]client.Client{}}
	ctx := t.Context()
	admin := g.env.Client
	rendered := render(t, nil)
	for _, name := range []string{gateGuard, storedGuard} {
		for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
			u := rendered.Get(kind, name)
			if u == nil {
				t.Fatalf("the chart renders no %s %s", kind, name)
			}
			g.objs = append(g.objs, u)
		}
	}
	for _, s := range rendered.Kind("Secret") {
		if s.GetAnnotations()["cert-manager.io/allow-direct-injection"] == "true" {
			g.bundle = s.GetName()
		}
	}
	if g.bundle == "" {
		t.Fatal("the chart renders no caBundle Secret")
	}
	must(t, admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gateNS}}))
	// Every account may write ConfigMaps and Secrets in the namespace and CRD status: RBAC
	// lets each forgery through, so a refusal below is the guard's.
	must(t, admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "config-writer"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "secrets"}, Verbs: []string{"get", "create", "update", "patch", "delete"}},
	}}))
	must(t, admin.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: statusWriter}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions", "customresourcedefinitions/status"}, Verbs: []string{"get", "update"}},
	}}))
	for _, user := range []string{hooksUser, managerUser, webhookUser, editorUser, svmUser, kcmUser} {
		subject := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}
		if ns, name, ok := strings.Cut(strings.TrimPrefix(user, "system:serviceaccount:"), ":"); ok && strings.HasPrefix(user, "system:serviceaccount:") {
			subject = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}
		}
		safe := strings.NewReplacer("@", "-", ":", "-", ".", "-").Replace(user)
		must(t, admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: gateNS, Name: "edit-" + safe},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "config-writer"}, Subjects: []rbacv1.Subject{subject}}))
		must(t, admin.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "status-" + safe},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: statusWriter}, Subjects: []rbacv1.Subject{subject}}))
		cfg := rest.CopyConfig(g.env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
		if subject.Kind == rbacv1.ServiceAccountKind {
			cfg.Impersonate.Groups = append(cfg.Impersonate.Groups, "system:serviceaccounts", "system:serviceaccounts:"+gateNS)
		}
		c, err := client.New(cfg, client.Options{Scheme: scheme(t)})
		must(t, err)
		g.clients[user] = c
	}
	g.clients["admin"] = admin
	g.install()
	return g
}

func scheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	must(t, clientgoscheme.AddToScheme(s))
	must(t, apiextensionsv1.AddToScheme(s))
	return s
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// install creates the policies and bindings and waits until the apiserver enforces them.
func (g *gateEnv) install() {
	for _, o := range g.objs {
		must(g.t, g.env.Client.Create(g.t.Context(), o.DeepCopyObject().(client.Object)))
	}
	testenv.Eventually(g.t, 30*time.Second, "the gate-state guard refuses a namespace editor", func() error {
		err := g.write(editorUser, g.configMap(migrate.ProgressObjectName(crd.WidgetName), "", map[string]string{"phase": "Running"}))
		g.cleanup(migrate.ProgressObjectName(crd.WidgetName))
		if !g.refusedBy(err, gateGuard) {
			return fmt.Errorf("not refused yet: %w", err)
		}
		return nil
	})
}

// uninstall deletes the bindings (the negative control: the same apiserver without them).
func (g *gateEnv) uninstall() {
	for _, o := range g.objs {
		if o.GetObjectKind().GroupVersionKind().Kind == "ValidatingAdmissionPolicyBinding" {
			must(g.t, g.env.Client.Delete(g.t.Context(), o.DeepCopyObject().(client.Object)))
		}
	}
	testenv.Eventually(g.t, 30*time.Second, "the gate-state guard gone", func() error {
		err := g.write(editorUser, g.configMap(migrate.ProgressObjectName(crd.WidgetName), "", map[string]string{"phase": "Running"}))
		g.cleanup(migrate.ProgressObjectName(crd.WidgetName))
		return err
	})
}

func (g *gateEnv) configMap(name, reason string, data map[string]string) client.Object {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: gateNS, Name: name}, Data: data}
	if reason != "" {
		cm.Annotations = map[string]string{gatestate.Annotation: reason}
	}
	return cm
}

func (g *gateEnv) secret(reason string, data map[string][]byte) client.Object {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gateNS, Name: g.bundle}, Data: data}
	if reason != "" {
		s.Annotations = map[string]string{gatestate.Annotation: reason}
	}
	return s
}

// write creates obj as user, or updates it when it exists.
func (g *gateEnv) write(user string, obj client.Object) error {
	c := g.clients[user]
	err := c.Create(g.t.Context(), obj)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	live := obj.DeepCopyObject().(client.Object)
	if err := g.env.Client.Get(g.t.Context(), client.ObjectKeyFromObject(obj), live); err != nil {
		return err
	}
	obj.SetResourceVersion(live.GetResourceVersion())
	return c.Update(g.t.Context(), obj)
}

func (g *gateEnv) cleanup(name string) {
	_ = g.env.Client.Delete(g.t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: gateNS, Name: name}})
}

func (g *gateEnv) refusedBy(err error, policy string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// TestGateStateGuard: every forged write of the state the upgrade gates trust is refused by
// the apiserver, naming the chart's policy; the chart's own accounts and a cluster admin with
// a reason write as before; only the migrate hook seals a checkpoint; only the migrator trims
// status.storedVersions. With the bindings deleted (the negative control), every forgery goes
// through on the same apiserver.
func TestGateStateGuard(t *testing.T) {
	g := startGateEnv(t)
	ctx := t.Context()
	gated := []string{migrate.ProgressObjectName(crd.WidgetName), apitraffic.LedgerName(crd.WidgetName), backup.RecordName(crd.WidgetName), controller.PausedConfigMap}
	forged := map[string]string{"phase": "Running", "lastKey": "~", "samples": "[]"}
	crdObj := g.storedTwice()

	type forgery struct {
		name  string
		write func() error
	}
	var forgeries []forgery
	for _, name := range gated {
		forgeries = append(forgeries,
			forgery{"a namespace editor writes " + name, func() error { return g.write(editorUser, g.configMap(name, "", forged)) }},
			forgery{"a namespace editor writes " + name + " with a reason", func() error { return g.write(editorUser, g.configMap(name, "I say so", forged)) }},
			forgery{"the controller plane's account writes " + name, func() error { return g.write(managerUser, g.configMap(name, "", forged)) }},
			forgery{"the webhook plane's account writes " + name, func() error { return g.write(webhookUser, g.configMap(name, "", forged)) }},
			forgery{"a cluster admin writes " + name + " without a reason", func() error { return g.write("admin", g.configMap(name, "", forged)) }},
		)
	}
	forgeries = append(forgeries,
		forgery{"a cluster admin seals a checkpoint", func() error {
			return g.write("admin", g.configMap(gated[0], "resume from here", map[string]string{"lastKey": "~", migrate.KeySealedBy: "me"}))
		}},
		forgery{"the webhook plane's account plants a CA in the bundle", func() error {
			return g.write(webhookUser, g.secret("", map[string][]byte{"ca.crt": []byte("planted")}))
		}},
		forgery{"a namespace editor plants a CA in the bundle", func() error {
			return g.write(editorUser, g.secret("", map[string][]byte{"ca.crt": []byte("planted")}))
		}},
		forgery{"the hooks' account plants a CA in the bundle", func() error {
			return g.write(hooksUser, g.secret("", map[string][]byte{"ca.crt": []byte("planted")}))
		}},
		forgery{"a CRD-status writer trims storedVersions", func() error { return g.trim(editorUser, crdObj) }},
	)
	reset := func() {
		for _, name := range gated {
			g.cleanup(name)
		}
		_ = g.env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: gateNS, Name: g.bundle}})
		crdObj = g.storedTwice()
	}

	t.Run("forged writes are refused, naming the policy", func(t *testing.T) {
		for _, f := range forgeries {
			reset()
			err := f.write()
			policy := gateGuard
			if strings.Contains(f.name, "storedVersions") {
				policy = storedGuard
			}
			if !g.refusedBy(err, policy) {
				t.Errorf("%s: got %v, want a refusal naming %s", f.name, err, policy)
				continue
			}
			t.Logf("%s: refused: %v", f.name, err)
		}
	})

	t.Run("the chart's accounts and an admin with a reason write", func(t *testing.T) {
		reset()
		for _, ok := range []struct {
			name  string
			write func() error
		}{
			{"the hooks' account seals a checkpoint", func() error {
				return g.write(hooksUser, g.configMap(gated[0], "", map[string]string{"lastKey": "ns/w", migrate.KeySealedBy: "hook"}))
			}},
			{"the hooks' account records traffic", func() error { return g.write(hooksUser, g.configMap(gated[1], "", forged)) }},
			{"the hooks' account pauses the controller", func() error { return g.write(hooksUser, g.configMap(gated[3], "", nil)) }},
			{"a cluster admin records a backup with a reason", func() error {
				return g.write("admin", g.configMap(gated[2], "widgetctl backup --out b", forged))
			}},
			{"a cluster admin drops the seal with a reason", func() error {
				return g.write("admin", g.configMap(gated[0], "restart the migration", map[string]string{"lastKey": "ns/w"}))
			}},
			{"helm creates the bundle Secret without data", func() error { return g.write("admin", g.secret("", nil)) }},
			{"the controller plane writes the bundle", func() error {
				return g.write(managerUser, g.secret("", map[string][]byte{"ca.crt": []byte("ca")}))
			}},
			{"the migrate hook trims storedVersions", func() error { return g.trim(hooksUser, crdObj) }},
			{"kube-controller-manager's storage version migrator trims storedVersions", func() error { return g.trim(svmUser, g.storedTwice()) }},
			{"kube-controller-manager without per-controller credentials trims storedVersions", func() error { return g.trim(kcmUser, g.storedTwice()) }},
		} {
			if err := ok.write(); err != nil {
				t.Errorf("%s: %v", ok.name, err)
			}
		}
		// widgetctl by hand: the client records its reason on what it writes.
		reset()
		c := gatestate.RecordingReason(g.env.Client, "widgetctl upgrade preflight --to unserve")
		if err := c.Create(ctx, g.configMap(gated[1], "", forged)); err != nil {
			t.Errorf("widgetctl by hand, as a cluster admin: %v", err)
		}
		if err := g.trim("admin", crdObj); err != nil {
			t.Errorf("widgetctl migrate by hand, as a cluster admin: %v", err)
		}
	})

	t.Run("negative control: without the bindings every forgery goes through", func(t *testing.T) {
		g.uninstall()
		for _, f := range forgeries {
			reset()
			if err := f.write(); err != nil {
				t.Errorf("%s: %v without the guard: the refusals above were not the guard's", f.name, err)
			}
		}
	})
}

// storedTwice (re)creates a CRD named as the Widget CRD whose status.storedVersions lists two
// versions, as at flip-storage, and returns it.
func (g *gateEnv) storedTwice() *apiextensionsv1.CustomResourceDefinition {
	ctx := g.t.Context()
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}
	live := &apiextensionsv1.CustomResourceDefinition{}
	err := g.env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live)
	if apierrors.IsNotFound(err) {
		live = &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crd.WidgetName},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: "widgetry.io", Scope: apiextensionsv1.NamespaceScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
				Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
					{Name: "v1alpha1", Served: true, Storage: false, Schema: schema},
					{Name: "v1", Served: true, Storage: true, Schema: schema},
				}}}
		must(g.t, g.env.Client.Create(ctx, live))
	} else {
		must(g.t, err)
	}
	// The apiserver writes the new CRD's conditions meanwhile.
	must(g.t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := g.env.Client.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
			return err
		}
		live.Status.StoredVersions = []string{"v1alpha1", "v1"}
		return g.env.Client.Status().Update(ctx, live)
	}))
	return live
}

// trim drops v1alpha1 from storedVersions as user.
func (g *gateEnv) trim(user string, c *apiextensionsv1.CustomResourceDefinition) error {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := g.env.Client.Get(g.t.Context(), client.ObjectKeyFromObject(c), live); err != nil {
		return err
	}
	live.Status.StoredVersions = []string{"v1"}
	return g.clients[user].Status().Update(g.t.Context(), live)
}
