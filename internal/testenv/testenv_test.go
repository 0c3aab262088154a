//go:build envtest

package testenv_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/widgetry/widget-operator/internal/testenv"
)

// pollTimeout bounds each wait for the control plane to reach a state.
const pollTimeout = 60 * time.Second

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime; print its errors (not its debug lines)
	// instead of having controller-runtime complain that no logger was set.
	ctrllog.SetLogger(funcr.New(func(prefix, args string) {
		fmt.Fprintln(os.Stderr, prefix, args)
	}, funcr.Options{}))
	os.Exit(m.Run())
}

const thingGroup = "testenv.widgetry.io"

// thingCRD is a namespaced Thing in two versions that share one schema and convert with
// strategy None: the apiserver only rewrites apiVersion. v1alpha1 is the storage version.
func thingCRD() *apiextensionsv1.CustomResourceDefinition {
	schema := &apiextensionsv1.CustomResourceValidation{
		OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"color": {Type: "string"},
						"size":  {Type: "integer"},
						"extra": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
					},
				},
			},
		},
	}
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: storage, Schema: schema,
		}
	}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "things." + thingGroup},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: thingGroup,
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "things", Singular: "thing", Kind: "Thing", ListKind: "ThingList",
			},
			Versions:   []apiextensionsv1.CustomResourceDefinitionVersion{version("v1alpha1", true), version("v1", false)},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
	}
}

func newThing(version, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: thingGroup, Version: version, Kind: "Thing"})
	u.SetNamespace("default")
	u.SetName(name)
	return u
}

// TestCRDVersionsRoundTrip proves the control plane boots from the binaries, installs a
// CRD given as an object, and serves one stored object through both of its versions.
func TestCRDVersionsRoundTrip(t *testing.T) {
	env := testenv.Start(t, testenv.Options{CRDs: []*apiextensionsv1.CustomResourceDefinition{thingCRD()}})
	ctx := t.Context()

	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "things." + thingGroup}, crd); err != nil {
		t.Fatalf("getting the installed CRD: %v", err)
	}
	if got := crd.Status.StoredVersions; !slices.Equal(got, []string{"v1alpha1"}) {
		t.Errorf("CRD storedVersions = %v, want [v1alpha1]", got)
	}

	for _, tc := range []struct{ write, read string }{{"v1", "v1alpha1"}, {"v1alpha1", "v1"}} {
		t.Run("write "+tc.write+" read "+tc.read, func(t *testing.T) {
			name := "thing-from-" + tc.write
			spec := map[string]any{
				"color": "teal",
				"size":  int64(3),
				"extra": map[string]any{"nested": map[string]any{"kept": true}},
			}
			if err := env.Client.Create(ctx, newThing(tc.write, name, spec)); err != nil {
				t.Fatalf("creating the Thing through %s: %v", tc.write, err)
			}

			got := newThing(tc.read, name, nil)
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(got), got); err != nil {
				t.Fatalf("reading the Thing through %s: %v", tc.read, err)
			}
			if want := thingGroup + "/" + tc.read; got.GetAPIVersion() != want {
				t.Errorf("apiVersion read back = %q, want %q", got.GetAPIVersion(), want)
			}
			if !reflect.DeepEqual(got.Object["spec"], spec) {
				t.Errorf("spec read through %s = %#v, want what was written through %s: %#v",
					tc.read, got.Object["spec"], tc.write, spec)
			}

			// kubectl, with the Env's kubeconfig file, sees the same object.
			out, err := env.Kubectl(t, "get", "things."+tc.read+"."+thingGroup, name, "--namespace=default",
				"--output=jsonpath={.apiVersion} {.spec.color} {.spec.extra.nested.kept}")
			if err != nil {
				t.Fatal(err)
			}
			if want := thingGroup + "/" + tc.read + " teal true"; out != want {
				t.Errorf("kubectl get = %q, want %q", out, want)
			}
		})
	}
}

// TestGarbageCollectorForegroundDeletion proves that the attached kube-controller-manager
// runs the deployment, replicaset and garbage-collector controllers: a Deployment gets a
// ReplicaSet and a Pod, and a foreground deletion removes them before the Deployment.
//
// To observe the intermediate state deterministically rather than by racing the garbage
// collector, the test holds the ReplicaSet with a finalizer of its own: the Deployment
// must stay, with its foregroundDeletion finalizer, until the ReplicaSet is really gone.
func TestGarbageCollectorForegroundDeletion(t *testing.T) {
	env := testenv.Start(t, testenv.Options{ControllerManager: true})
	ctx := t.Context()
	c := env.Client

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gc-foreground"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	deploy := newDeployment(ns.Name, "web")
	if err := c.Create(ctx, deploy); err != nil {
		t.Fatalf("creating the Deployment: %v", err)
	}

	rs := waitForOwned(t, c, &appsv1.ReplicaSetList{}, ns.Name, deploy.UID, "the deployment controller to create a ReplicaSet").(*appsv1.ReplicaSet)
	pod := waitForOwned(t, c, &corev1.PodList{}, ns.Name, rs.UID, "the replicaset controller to create a Pod").(*corev1.Pod)
	if pod.Spec.NodeName != "" || pod.Status.Phase != corev1.PodPending {
		t.Errorf("Pod %s: nodeName %q, phase %q; want unscheduled and Pending (there are no nodes)",
			pod.Name, pod.Spec.NodeName, pod.Status.Phase)
	}

	const hold = "testenv.widgetry.io/hold"
	updateFinalizers(t, c, rs, func(f []string) []string { return append(f, hold) })

	if err := c.Delete(ctx, deploy, client.PropagationPolicy(metav1.DeletePropagationForeground)); err != nil {
		t.Fatalf("deleting the Deployment in the foreground: %v", err)
	}
	// The apiserver marks the owner synchronously; only the garbage collector may finish it.
	assertDeletingInForeground(t, c, deploy)

	// The garbage collector deletes the ReplicaSet (in the foreground too, since it has a
	// dependent), which deletes the Pod at once (a Pod without a node has nothing to drain),
	// and then drops the ReplicaSet's foregroundDeletion finalizer; ours keeps it.
	poll(t, "the garbage collector to delete the Pod and process the ReplicaSet", func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("Pod still there (err=%v)", err), nil
		}
		cur := &appsv1.ReplicaSet{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rs), cur); err != nil {
			return false, "", fmt.Errorf("the held ReplicaSet must still exist: %w", err)
		}
		state := fmt.Sprintf("ReplicaSet deletionTimestamp=%v finalizers=%v", cur.DeletionTimestamp, cur.Finalizers)
		return cur.DeletionTimestamp != nil && slices.Equal(cur.Finalizers, []string{hold}), state, nil
	})

	// The intermediate state: the ReplicaSet exists, so the Deployment must too.
	assertDeletingInForeground(t, c, deploy)

	updateFinalizers(t, c, rs, func(f []string) []string {
		return slices.DeleteFunc(f, func(s string) bool { return s == hold })
	})
	waitGone(t, c, rs, "the ReplicaSet")
	waitGone(t, c, deploy, "the Deployment (the garbage collector drops its foregroundDeletion finalizer)")
}

func newDeployment(namespace, name string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "registry.k8s.io/pause:3.10",
				}}},
			},
		},
	}
}

// waitForOwned waits until list (a ReplicaSetList or PodList) in namespace holds an
// object whose controller is owner, and returns it.
func waitForOwned(t *testing.T, c client.Client, list client.ObjectList, namespace string, owner types.UID, what string) client.Object {
	t.Helper()
	var found client.Object
	poll(t, what, func(ctx context.Context) (bool, string, error) {
		if err := c.List(ctx, list, client.InNamespace(namespace)); err != nil {
			return false, "", err
		}
		var items []client.Object
		switch l := list.(type) {
		case *appsv1.ReplicaSetList:
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		case *corev1.PodList:
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		}
		for _, obj := range items {
			ref := metav1.GetControllerOf(obj)
			if ref == nil || ref.UID != owner {
				continue
			}
			if !ptr.Deref(ref.BlockOwnerDeletion, false) {
				return false, "", fmt.Errorf("%T %s does not block its owner's deletion: %+v", obj, obj.GetName(), ref)
			}
			found = obj
			return true, "", nil
		}
		return false, fmt.Sprintf("%d objects, none controlled by %v", len(items), owner), nil
	})
	return found
}

// assertDeletingInForeground checks that the Deployment exists, marked for deletion and
// waiting for its dependents.
func assertDeletingInForeground(t *testing.T, c client.Client, deploy *appsv1.Deployment) {
	t.Helper()
	cur := &appsv1.Deployment{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(deploy), cur); err != nil {
		t.Fatalf("the Deployment must exist while its ReplicaSet does: %v", err)
	}
	if cur.DeletionTimestamp == nil || !slices.Contains(cur.Finalizers, metav1.FinalizerDeleteDependents) {
		t.Fatalf("Deployment deletionTimestamp=%v finalizers=%v; want set and containing %q",
			cur.DeletionTimestamp, cur.Finalizers, metav1.FinalizerDeleteDependents)
	}
}

// updateFinalizers rewrites the ReplicaSet's finalizers, retrying on conflicts with the
// controllers that update it concurrently.
func updateFinalizers(t *testing.T, c client.Client, rs *appsv1.ReplicaSet, edit func([]string) []string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &appsv1.ReplicaSet{}
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(rs), cur); err != nil {
			return err
		}
		cur.Finalizers = edit(cur.Finalizers)
		return c.Update(t.Context(), cur)
	})
	if err != nil {
		t.Fatalf("updating the finalizers of ReplicaSet %s: %v", rs.Name, err)
	}
}

func waitGone(t *testing.T, c client.Client, obj client.Object, what string) {
	t.Helper()
	poll(t, what+" to disappear", func(ctx context.Context) (bool, string, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, fmt.Sprintf("still there (err=%v)", err), nil
	})
}

// poll calls check every 250ms until it reports done, fails the test on its error, or
// fails it after pollTimeout with the last state check described.
func poll(t *testing.T, what string, check func(context.Context) (done bool, state string, err error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), pollTimeout)
	defer cancel()
	start := time.Now()
	var last string
	for {
		done, state, err := check(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			t.Fatalf("waiting for %s: %v", what, err)
		case done:
			t.Logf("%s: took %s", what, time.Since(start).Round(10*time.Millisecond))
			return
		}
		if state != "" {
			last = state
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %s waiting for %s; last state: %s", pollTimeout, what, strings.TrimSpace(last))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
