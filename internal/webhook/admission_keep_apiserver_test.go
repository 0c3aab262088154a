//go:build envtest

package webhook_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/widgetry/widget-operator/api/v1"
	"github.com/widgetry/widget-operator/internal/conversion"
	"github.com/widgetry/widget-operator/internal/testenv"
)

// TestV1alpha1ReplaceKeepsWhatItCannotSee: `kubectl replace` of a v1alpha1 manifest that
// knows nothing of the conversion-data annotation, against a paused Widget with a 1.5s
// timeout, keeps both (read back through v1); a replace that changes timeoutSeconds replaces
// the timeout and still keeps paused. The real apiserver runs the mutating webhook and the
// conversion webhook of a real widget-manager.
func TestV1alpha1ReplaceKeepsWhatItCannotSee(t *testing.T) {
	env, _, _ := startOperator(t, "keep")
	ctx := context.Background()
	w := &v1.Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "keep", Name: "paused"},
		Spec: v1.WidgetSpec{Image: "srv:1", Paused: ptr.To(true), Timeout: ptr.To("1.5s")}}
	if err := env.Client.Create(ctx, w); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name           string
		timeoutSeconds int
		wantTimeout    string
	}{
		{"same timeoutSeconds keeps the exact timeout", 2, "1.5s"},
		{"changed timeoutSeconds replaces it", 5, "5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			image := fmt.Sprintf("srv:%d", tc.timeoutSeconds)
			manifest := filepath.Join(t.TempDir(), "old.yaml")
			// What an old client holds: no annotations at all, whole seconds.
			old := fmt.Sprintf("apiVersion: widgetry.io/v1alpha1\nkind: Widget\nmetadata: {name: paused, namespace: keep}\nspec: {image: %q, replicas: 1, timeoutSeconds: %d}\n", image, tc.timeoutSeconds)
			if err := os.WriteFile(manifest, []byte(old), 0o600); err != nil {
				t.Fatal(err)
			}
			// kubectl replace reads the resourceVersion and PUTs; the controller may write in
			// between (status), which is a conflict to retry, not a failure.
			testenv.Eventually(t, 30*time.Second, "kubectl replace", func() error {
				out, err := env.Kubectl(t, "replace", "-f", manifest)
				if err != nil && !strings.Contains(err.Error(), "the object has been modified") {
					t.Fatalf("kubectl replace: %v\n%s", err, out)
				}
				return err
			})
			got := &v1.Widget{}
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.Image != image || !ptr.Deref(got.Spec.Paused, false) || ptr.Deref(got.Spec.Timeout, "") != tc.wantTimeout {
				t.Errorf("read back through v1: image %q paused %v timeout %v; want %q, true, %s", got.Spec.Image, got.Spec.Paused, ptr.Deref(got.Spec.Timeout, "<unset>"), image, tc.wantTimeout)
			}
			if _, ok := got.Annotations[conversion.DataAnnotation]; ok {
				t.Errorf("v1 shows the conversion-data annotation: %v", got.Annotations)
			}
		})
	}
}
