package upgrade

import (
	"fmt"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// CheckUninstall refuses to uninstall the operator while the CRD serves more than one version
// through its conversion webhook: the webhook goes with the release, and the CRD (kept) would
// go on naming it, so every read that needs a conversion would fail — through the version that
// is not stored, every LIST once objects are stored in both — and with them the garbage
// collector's and the namespace controller's, so Widgets and namespaces holding them could not
// be deleted. With one version served (initial, unserve) nothing needs converting. A nil CRD
// (not installed) is safe.
func CheckUninstall(live *apiextensionsv1.CustomResourceDefinition) error {
	if live == nil {
		return nil
	}
	conv := live.Spec.Conversion
	if conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter {
		return nil
	}
	var served []string
	storage := ""
	for _, v := range live.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
		if v.Storage {
			storage = v.Name
		}
	}
	if len(served) < 2 {
		return nil
	}
	return &Refusal{
		Message: fmt.Sprintf("uninstall refused before any change: CRD %s serves %s (storage %s), so reads through every version but the one an object is stored in need the conversion webhook, which goes with the release; those reads, garbage collection of its objects and deletion of namespaces holding them would fail until the operator is installed again",
			live.Name, strings.Join(served, " and "), storage),
		Next: "nothing in the cluster changed, but Helm now marks the release uninstalling: helm rollback <release> <its current revision> (helm history lists it) marks it deployed again; " +
			"then finish the walk to unserve (runbooks/upgrade/unserve.md) or roll back to initial (runbooks/upgrade/add-version.md#rollback), and uninstall; " +
			"or accept the outage: helm upgrade --reset-then-reuse-values --set apiUpgrade.allowUnsafeUninstall=true, then helm uninstall (runbooks/upgrade/README.md#uninstall-at-a-stage)",
	}
}
