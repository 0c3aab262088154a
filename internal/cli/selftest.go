package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/crd"
)

// NewSelftestCommand builds `widgetctl selftest`, the chart's helm test.
func NewSelftestCommand(g *GlobalOptions) *cobra.Command {
	var namespace string
	cmd := &cobra.Command{
		Use:   "selftest",
		Short: "Create a Widget through v1alpha1, read it through v1 (when served), delete it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if namespace == "" {
				namespace = g.Namespace()
			}
			rc, err := g.RESTConfig()
			if err != nil {
				return err
			}
			s := runtime.NewScheme()
			utilruntime.Must(apiextensionsv1.AddToScheme(s))
			utilruntime.Must(v1.AddToScheme(s))
			utilruntime.Must(v1alpha1.AddToScheme(s))
			c, err := client.New(rc, client.Options{Scheme: s})
			if err != nil {
				return err
			}
			return selftest(cmd.Context(), g, c, namespace)
		},
	}
	cmd.Flags().StringVar(&namespace, "namespace", "", "where to create the test Widget (default: the context's namespace)")
	return cmd
}

func selftest(ctx context.Context, g *GlobalOptions, c client.Client, namespace string) error {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
		return fmt.Errorf("read CRD %s: %w", crd.WidgetName, err)
	}
	served := map[string]bool{}
	for _, v := range live.Spec.Versions {
		served[v.Name] = v.Served
	}
	name := fmt.Sprintf("widgetctl-selftest-%d", time.Now().UnixNano()%1_000_000)
	key := client.ObjectKey{Namespace: namespace, Name: name}
	if served["v1alpha1"] {
		w := &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: v1alpha1.WidgetSpec{Image: "registry.example.com/selftest:v1", Replicas: ptr.To[int32](0), TimeoutSeconds: ptr.To[int32](90)}}
		if err := c.Create(ctx, w); err != nil {
			return fmt.Errorf("create %s through v1alpha1: %w", key, err)
		}
		fmt.Fprintf(g.Stdout, "created %s through v1alpha1\n", key)
	} else {
		w := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: v1.WidgetSpec{Image: "registry.example.com/selftest:v1", Size: ptr.To[int32](0), Timeout: ptr.To("1m30s")}}
		if err := c.Create(ctx, w); err != nil {
			return fmt.Errorf("create %s through v1 (v1alpha1 is not served): %w", key, err)
		}
		fmt.Fprintf(g.Stdout, "created %s through v1 (v1alpha1 is not served)\n", key)
	}
	defer func() {
		if err := c.Delete(context.WithoutCancel(ctx), &v1alpha1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}); err != nil && !apierrors.IsNotFound(err) && served["v1alpha1"] {
			fmt.Fprintf(g.Stderr, "delete %s: %v\n", key, err)
		}
		_ = c.Delete(context.WithoutCancel(ctx), &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})
	}()
	if served["v1"] {
		hub := &v1.Widget{}
		if err := c.Get(ctx, key, hub); err != nil {
			return fmt.Errorf("read %s through v1: %w", key, err)
		}
		if ptr.Deref(hub.Spec.Size, -1) != 0 || ptr.Deref(hub.Spec.Timeout, "") != "1m30s" {
			return fmt.Errorf("read %s through v1: size %v timeout %v, want 0 and 1m30s", key, hub.Spec.Size, hub.Spec.Timeout)
		}
		fmt.Fprintf(g.Stdout, "read %s through v1: size 0, timeout 1m30s as written\n", key)
	}
	fmt.Fprintf(g.Stdout, "selftest ok\n")
	return nil
}
