package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/api/v1alpha1"
	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/scheme"
)

// NewSelftestCommand builds `widgetctl selftest`, the chart's helm test.
func NewSelftestCommand(g *GlobalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "selftest",
		Short: "Create a Widget through v1 (v1alpha1 before v1 is served) in -n (default: the context's namespace), read it back through v1, delete it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := widgetClient(g)
			if err != nil {
				return err
			}
			return selftest(cmd.Context(), g, c, g.Namespace())
		},
	}
	return cmd
}

// NewWaitWebhooksCommand builds `widgetctl wait-webhooks`, the chart's post-install and
// post-upgrade hook. helm --wait returns once the manager's pods are Ready, but kube-proxy
// programs the webhook Service a moment later, and until then the apiserver's calls to the
// webhooks are refused, and so is every Widget write. The hook makes helm return only once a
// Widget passes the webhooks, as cert-manager's startupapicheck does for its own webhook.
func NewWaitWebhooksCommand(g *GlobalOptions) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait-webhooks",
		Short: "Wait until a Widget passes the admission webhooks (server-side dry-run create in -n, default: the context's namespace); exit 0 ok, 2 timed out",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := widgetClient(g)
			if err != nil {
				return err
			}
			return waitWebhooks(cmd.Context(), g, c, g.Namespace(), timeout)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "give up after this long")
	return cmd
}

// widgetClient is a client for the CRD and both Widget versions.
func widgetClient(g *GlobalOptions) (client.Client, error) {
	rc, err := g.RESTConfig()
	if err != nil {
		return nil, err
	}
	return g.NewClient(rc, scheme.New())
}

// servedVersions reads which Widget versions the CRD serves.
func servedVersions(ctx context.Context, c client.Client) (map[string]bool, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: crd.WidgetName}, live); err != nil {
		return nil, fmt.Errorf("read CRD %s: %w", crd.WidgetName, err)
	}
	served := map[string]bool{}
	for _, v := range live.Spec.Versions {
		served[v.Name] = v.Served
	}
	return served, nil
}

// testWidget is a small Widget (size 0, timeout 90 s) in v1 whenever it is served, else in
// v1alpha1; it returns the version too. The chart's own hooks and tests never count as
// v1alpha1 traffic, which the preflight of unserve refuses on (at add-version a write through
// v1 still goes through the conversion webhook: v1alpha1 is stored).
func testWidget(served map[string]bool, namespace, name string) (client.Object, string) {
	meta := metav1.ObjectMeta{Namespace: namespace, Name: name}
	if !served["v1"] {
		return &v1alpha1.Widget{ObjectMeta: meta,
			Spec: v1alpha1.WidgetSpec{Image: "registry.example.com/selftest:v1", Replicas: ptr.To[int32](0), TimeoutSeconds: ptr.To[int32](90)}}, "v1alpha1"
	}
	return &v1.Widget{ObjectMeta: meta,
		Spec: v1.WidgetSpec{Image: "registry.example.com/selftest:v1", Size: ptr.To[int32](0), Timeout: ptr.To("1m30s")}}, "v1"
}

// waitWebhooks dry-runs the creation of a Widget once a second until the apiserver admits it
// (its mutating and validating webhooks answered) or timeout passes.
func waitWebhooks(ctx context.Context, g *GlobalOptions, c client.Client, namespace string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var last error
	for attempt := 1; ; attempt++ {
		served, err := servedVersions(ctx, c)
		if err == nil {
			obj, version := testWidget(served, namespace, "widgetctl-wait-webhooks")
			if err = c.Create(ctx, obj, client.DryRunAll); err == nil {
				fmt.Fprintf(g.Stdout, "a Widget passed the webhooks (dry-run create through %s) after %s, attempt %d\n",
					version, time.Since(start).Round(100*time.Millisecond), attempt)
				return nil
			}
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		if attempt == 1 || attempt%10 == 0 {
			fmt.Fprintf(g.Stderr, "waiting for the webhooks: %v\n", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no Widget passed the webhooks within %s (last: %w): check the webhook Service's endpoints and the manager pods (runbooks/alerts/WidgetWebhookDown.md)", timeout, last)
		case <-time.After(time.Second):
		}
	}
}

func selftest(ctx context.Context, g *GlobalOptions, c client.Client, namespace string) error {
	served, err := servedVersions(ctx, c)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("widgetctl-selftest-%d", time.Now().UnixNano()%1_000_000)
	key := client.ObjectKey{Namespace: namespace, Name: name}
	w, version := testWidget(served, namespace, name)
	if err := c.Create(ctx, w); err != nil {
		return fmt.Errorf("create %s through %s: %w", key, version, err)
	}
	if version == "v1alpha1" {
		fmt.Fprintf(g.Stdout, "created %s through v1alpha1 (v1 is not served)\n", key)
	} else {
		fmt.Fprintf(g.Stdout, "created %s through v1\n", key)
	}
	defer func() {
		if err := c.Delete(context.WithoutCancel(ctx), w); err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(g.Stderr, "delete %s: %v\n", key, err)
		}
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
