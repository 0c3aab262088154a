#!/usr/bin/env bash
# make demo: builds what is missing, starts the local single-node cluster (a real node inside
# a network namespace, scripts/README.md), runs widget-operator on it and shows it working,
# then tears everything down (KEEP=1 leaves the cluster running). Needs root, as kind needs
# docker.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cluster=scripts/local-cluster.sh
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [[ $(id -u) != 0 ]]; then
	echo "make demo needs root: it runs a real Kubernetes node in a network namespace (as kind needs docker)." >&2
	exit 1
fi

step "1. Toolchain (about 25 minutes the first time on 2 cores, seconds afterwards)"
scripts/toolchain.sh

step "2. The local cluster: etcd, kube-apiserver, controller-manager, scheduler, containerd, kubelet, kube-proxy"
cleanup() {
	if [[ ${KEEP:-0} == 1 ]]; then
		step "Cluster left running (KEEP=1). Use it with:"
		echo "  $cluster kubectl get widgets -A"
		echo "  $cluster down    # when done"
	else
		step "Tearing down"
		"$cluster" down >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$cluster" up >/dev/null
"$cluster" kubectl get nodes -o wide

step "3. The Widget API: the CRD as generated from api/ (stage initial would serve v1alpha1 only)"
"$cluster" kubectl apply -f internal/crd/bases/widgetry.io_widgets.yaml
"$cluster" kubectl wait --for condition=Established crd/widgets.widgetry.io --timeout=60s
"$cluster" kubectl get crd widgets.widgetry.io -o custom-columns='NAME:.metadata.name,VERSIONS:.spec.versions[*].name,STORED:.status.storedVersions'

step "4. Everything running on the node"
"$cluster" kubectl get crd,deploy,pods -A
echo
echo "demo: ok"
