package main

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/manager"
)

// extraCollectors are the manager's metrics beyond the webhooks' and controller-runtime's.
func extraCollectors() []func(client.Reader, func() manager.CertificateLeaf) error {
	return nil
}
