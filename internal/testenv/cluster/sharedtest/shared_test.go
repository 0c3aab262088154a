//go:build e2e

// Package sharedtest proves cluster.Shared and cluster.Main: the tests of one package reuse
// one cluster, torn down after the last of them.
package sharedtest

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/widgetry/widget-operator/internal/testenv/cluster"
)

func TestMain(m *testing.M) { os.Exit(cluster.Main(m)) }

var first *cluster.Cluster

func TestSharedFirst(t *testing.T) {
	first = cluster.Shared(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shared-first"}}
	if _, err := first.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	first.StartCertManager(t)
}

func TestSharedSecond(t *testing.T) {
	c := cluster.Shared(t)
	if first != nil && c != first {
		t.Fatal("Shared brought up a second cluster")
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(context.Background(), "shared-first", metav1.GetOptions{}); err != nil {
		t.Errorf("the first test's namespace is gone: %v", err)
	}
	c.StartCertManager(t) // already running: a no-op
	if _, err := c.Client.CoreV1().Namespaces().Get(context.Background(), "cert-manager", metav1.GetOptions{}); err != nil {
		t.Errorf("cert-manager namespace: %v", err)
	}
}
