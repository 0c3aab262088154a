package widgetenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/api/v1alpha1"
)

// GitOpsWidget is the name of the Widget in GitOpsManifest, GitOpsOrder the order of its
// endpoints: not name order, which v1 would impose without the conversion data.
const (
	GitOpsWidget = "ordered"
	GitOpsOrder  = "web,admin,grpc"
)

// WriteGitOpsManifest writes, into dir, the v1alpha1 manifest a GitOps tool applies
// server-side before the storage flip (issue #34): a Widget in namespace whose endpoints are
// not in name order. It returns the file's path. The envtest walk (internal/upgrade) and the
// end-to-end walk (internal/e2e) apply the same manifest and check it the same way
// (CheckGitOpsWidget, then kubectl diff --server-side --field-manager=gitops).
func WriteGitOpsManifest(dir, namespace string) (string, error) {
	f := filepath.Join(dir, "gitops.yaml")
	manifest := `apiVersion: widgetry.io/v1alpha1
kind: Widget
metadata:
  name: ` + GitOpsWidget + `
  namespace: ` + namespace + `
spec:
  image: registry.example.com/ordered:v1
  endpoints:
    - name: web
      port: 8080
    - name: admin
      port: 9000
    - name: grpc
      port: 9090
`
	return f, os.WriteFile(f, []byte(manifest), 0o600)
}

// CheckGitOpsWidget reads the manifest's Widget through v1alpha1 and says whether its
// endpoints come back in the order applied, whatever version it is stored in.
func CheckGitOpsWidget(ctx context.Context, c client.Reader, namespace string) error {
	got := &v1alpha1.Widget{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: GitOpsWidget}, got); err != nil {
		return fmt.Errorf("read the manifest's Widget through v1alpha1: %w", err)
	}
	names := make([]string, 0, len(got.Spec.Endpoints))
	for _, e := range got.Spec.Endpoints {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != GitOpsOrder {
		return fmt.Errorf("the manifest's endpoints read back through v1alpha1 as %v, want the order applied: %s", names, GitOpsOrder)
	}
	return nil
}
