package widgetenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/testenv"
)

// ServiceAccountToken creates a ServiceAccount in Namespace and returns a token for it. With
// metricsReader it may GET /metrics (what the chart's metrics ClusterRole grants Prometheus);
// the binding exists before the token is first used, because the manager's authorization
// filter caches a denial for 30 seconds.
func ServiceAccountToken(t testing.TB, env *testenv.Env, name string, metricsReader bool) string {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name}}); err != nil {
		t.Fatalf("widgetenv: create ServiceAccount %s: %v", name, err)
	}
	if metricsReader {
		for _, obj := range []client.Object{
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics-reader"}, Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}},
			&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-metrics-reader"},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name + "-metrics-reader"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: Namespace, Name: name}}},
		} {
			if err := env.Client.Create(ctx, obj); err != nil {
				t.Fatalf("widgetenv: create %T: %v", obj, err)
			}
		}
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if metricsReader {
		// Wait until the apiserver's authorizer sees the binding, so the first scrape is not
		// denied (and the denial cached).
		testenv.Eventually(t, 30*time.Second, "RBAC lets "+name+" read /metrics", func() error {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:                  "system:serviceaccount:" + Namespace + ":" + name,
				NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
			}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if !sar.Status.Allowed {
				return fmt.Errorf("not allowed yet: %s", sar.Status.Reason)
			}
			return nil
		})
	}
	tr, err := cs.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("widgetenv: token for %s: %v", name, err)
	}
	return tr.Status.Token
}
