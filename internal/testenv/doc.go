// Package testenv starts the Kubernetes control plane that this project's integration
// tests run against: controller-runtime's envtest (etcd and kube-apiserver) and, on
// request, a real kube-controller-manager, so that garbage collection, Deployments,
// ReplicaSets, EndpointSlices and PodDisruptionBudget status behave as in a cluster.
// There are no nodes and no kubelet: Pods are created but stay Pending. Env.StartAPIServer
// adds further kube-apiservers on the same etcd, for what differs between the instances of
// an HA control plane.
//
// The binaries are the pinned toolchain built from source by `make tools` into the
// repository's bin/ (see Assets). Tests fail, never skip, when they are missing.
//
// A typical test:
//
//	env := testenv.Start(t, testenv.Options{CRDDirectoryPaths: []string{"../crd/bases"}})
//	if err := env.Client.Create(t.Context(), obj); err != nil { ... }
//	out, err := env.Kubectl(t, "get", "widgets", "-o", "yaml")
//
// Everything Start launches is stopped, and its files removed, by t.Cleanup. When the
// test failed, the component logs are copied to a kept directory (under $TESTENV_LOG_DIR
// if set, else the system temp directory) and their last lines are written to the test
// log.
//
// controller-runtime's global logger is left alone; set it in TestMain (for example
// with log.SetLogger) if you want to see envtest's own messages.
package testenv
