// Package e2e holds the end-to-end tests, apart from the product packages they exercise:
//
//   - the chart walk (chart_walk_test.go): install, the staged upgrade one helm upgrade at a
//     time, helm rollback, helm test and uninstall, with Helm 3 and Helm 4, cert-manager's real
//     controllers and cainjector;
//   - the controller on a real node (controller_test.go): a Widget's pods run, the real
//     readiness probe gates them, and the Widget reports Ready;
//   - the production proof (production_proof_test.go): the chart installed on a real node
//     with its Prometheus monitoring, and zero failed API requests across a rollout restart,
//     a helm upgrade of the pod template, a forced certificate renewal and the loss of the
//     leader, while a client drives Widgets through v1alpha1 so that every request crosses
//     the webhook Service; on three nodes (WIDGET_PROOF_NODES=3, make test-long) also a
//     drained node with zero failed requests and a node stopped dead, what the load sees
//     measured second by second (proof_nodes_test.go);
//   - the README's commands (readme_test.go): every shell command of README.md is run, or its
//     flags and values are checked by the tool itself, or it is what the demo or CI runs;
//   - the chart's value sets (value_sets_test.go): chart-testing's install of every
//     charts/widget-operator/ci/*-values.yaml with Helm 4 on three nodes in three zones
//     (hostNetwork with two replicas on two nodes and a rollout with no node to spare,
//     priority with its quota, OpenShift's UIDs, monitoring, NetworkPolicy ...), each plane's
//     replicas spread over nodes and zones, helm test, and an uninstall that leaves nothing
//     but the CRD.
//
// Each test brings up a cluster of its own (cluster.Start): the walk uninstalls leaving the
// CRD behind, which the next test must not inherit.
//
// Its tests build only with -tags e2e; make test-e2e runs them alone, never beside other
// packages competing for the same cores.
package e2e
