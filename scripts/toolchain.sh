#!/usr/bin/env bash
# Builds the pinned toolchain (Kubernetes v1.37 control plane and node, etcd, Helm 3 and 4,
# controller-gen) from the Go module proxy into bin/. Idempotent: a binary whose stamp matches
# its version and build flags is skipped, so a warm run takes seconds.
#
# Why from source: no image registry, GitHub or release download is reachable here, so
# setup-envtest and kind cannot work; the Go module proxy can.
#
# Usage: scripts/toolchain.sh [name...]   (default: all; names as in bin/)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="$root/scripts/tools"
bin="${TOOLCHAIN_BIN:-$root/bin}"
# shellcheck source=scripts/tools/versions.env
. "$tools/versions.env"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$bin/.stamps"

say() { printf '[toolchain %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# require_version MODDIR MODULE VERSION: the wrapper's go.mod must pin what versions.env says.
require_version() {
	if ! grep -qE "^(require )?[[:space:]]*$2 $3( // indirect)?$" "$tools/$1/go.mod"; then
		echo "scripts/tools/$1/go.mod does not require $2 $3 as scripts/tools/versions.env says;" >&2
		echo "edit one so they agree (then: cd scripts/tools/$1 && go mod tidy)." >&2
		exit 1
	fi
}
require_version kube k8s.io/kubernetes "$KUBE_VERSION"
require_version etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
require_version helm3 helm.sh/helm/v3 "$HELM3_VERSION"
require_version helm4 helm.sh/helm/v4 "$HELM4_VERSION"
require_version devtools sigs.k8s.io/controller-tools "$CONTROLLER_TOOLS_VERSION"
require_version cert-manager github.com/cert-manager/cert-manager "$CERT_MANAGER_VERSION"
require_version mkimage github.com/google/go-containerregistry "$GO_CONTAINERREGISTRY_VERSION"
require_version prometheus github.com/prometheus/prometheus "$PROMETHEUS_VERSION"
require_version kubeconform github.com/yannh/kubeconform "$KUBECONFORM_VERSION"
require_version golangci-lint github.com/golangci/golangci-lint/v2 "$GOLANGCI_LINT_VERSION"
require_version golangci-lint sigs.k8s.io/kube-api-linter "$KUBE_API_LINTER_VERSION"
if grep -E '^[[:space:]]*k8s\.io/[a-z-]+ => k8s\.io/' "$tools/kube/go.mod" | grep -vq " $KUBE_STAGING_VERSION\$"; then
	echo "scripts/tools/kube/go.mod replaces a staging module with a version other than $KUBE_STAGING_VERSION" >&2
	exit 1
fi

kube_minor=${KUBE_VERSION#v1.}
kube_minor=${kube_minor%%.*}
kube_ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$kube_minor"
	kube_ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done
helm3_ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM3_VERSION"
for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	# Helm 3 otherwise assumes Kubernetes v1.20 offline and rejects kubeVersion ">=1.30.0-0".
	helm3_ldflags+=" -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$kube_minor"
done
helm4_ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM4_VERSION"

# build NAME MODDIR PACKAGE LDFLAGS: go build PACKAGE inside the wrapper module into bin/NAME.
build() {
	local name=$1 dir=$2 pkg=$3 ldflags=$4
	local stamp sum
	sum=$(sha256sum "$tools/$dir/go.sum" | cut -c1-16)
	stamp="$KUBE_VERSION $ETCD_VERSION $HELM3_VERSION $HELM4_VERSION $CONTROLLER_TOOLS_VERSION|$pkg|$ldflags|$sum"
	# Modules with their own sources (the launcher, mkimage and its images) rebuild when those change.
	local src
	src=$(cd "$tools/$dir" && find . -name '*.go' -print0 | sort -z | xargs -0r sha256sum | sha256sum | cut -c1-16)
	[[ -z $(find "$tools/$dir" -name '*.go' -print -quit) ]] || stamp+="|$CERT_MANAGER_VERSION|$src"
	[[ -z ${BUILD_TAGS:-} ]] || stamp+="|tags=$BUILD_TAGS"
	if [[ -x "$bin/$name" && "$(cat "$bin/.stamps/$name" 2>/dev/null)" == "$stamp" ]]; then
		say "$name: up to date"
		return
	fi
	local start=$SECONDS
	say "$name: building $pkg ..."
	(cd "$tools/$dir" && go build -trimpath ${BUILD_TAGS:+-tags "$BUILD_TAGS"} -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
	mv "$bin/$name.tmp" "$bin/$name"
	echo "$stamp" >"$bin/.stamps/$name"
	say "$name: built in $((SECONDS - start))s"
	built+=("$name:$((SECONDS - start))")
}

# module_dir MODULE@VERSION: the module's directory in Go's module cache, downloaded if needed.
module_dir() {
	go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}

# chart-testing: `go install ...@v3.14.0` fails (the proxy answers 403 to the module's version
# list, which go install reads for deprecations), but `go mod download` of the exact version
# works, so it is built as the main module from a writable copy of its module directory, with
# its etc/ (lintconf.yaml, chart_schema.yaml) copied to bin/ct-etc.
build_ct() {
	local stamp="$CHART_TESTING_VERSION|-s -w"
	if [[ -x "$bin/ct" && "$(cat "$bin/.stamps/ct" 2>/dev/null)" == "$stamp" ]]; then
		say "ct: up to date"
		return
	fi
	local start=$SECONDS src="$bin/.src/chart-testing"
	say "ct: building github.com/helm/chart-testing/v3@$CHART_TESTING_VERSION from a writable copy ..."
	rm -rf "$src"
	mkdir -p "$src"
	cp -r "$(module_dir "github.com/helm/chart-testing/v3@$CHART_TESTING_VERSION")/." "$src/"
	chmod -R u+w "$src"
	(cd "$src" && go build -trimpath -ldflags "-s -w -X github.com/helm/chart-testing/v3/ct/cmd.Version=$CHART_TESTING_VERSION" -o "$bin/ct.tmp" ./ct)
	mv "$bin/ct.tmp" "$bin/ct"
	rm -rf "$bin/ct-etc"
	cp -r "$src/etc" "$bin/ct-etc"
	rm -rf "$src"
	echo "$stamp" >"$bin/.stamps/ct"
	say "ct: built in $((SECONDS - start))s"
	built+=("ct:$((SECONDS - start))")
}

all=(etcd kube-apiserver kubectl kube-controller-manager kube-scheduler kubelet kube-proxy helm3 helm4 controller-gen
	mkimage pause sample-server cert-manager prometheus ct kubeconform golangci-lint)
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=("${all[@]}")

missing=0
for n in "${want[@]}"; do [[ -x "$bin/$n" ]] || missing=1; done
# What this run built, as name:seconds, for the report below; and whether Go's build cache
# held anything before it (a full build on a warm cache is no measure of a fresh machine).
built=()
run_start=$SECONDS
gocache=$(go env GOCACHE)
cache_was=cold
if [[ -n $(find "$gocache" -mindepth 2 -maxdepth 2 -print -quit 2>/dev/null) ]]; then cache_was=warm; fi
if [[ $missing == 1 ]]; then
	say "a cold build of the whole toolchain takes about 25 minutes on 2 cores (kube-apiserver alone ~15);"
	say "later runs reuse Go's build cache and finish in seconds."
fi

for n in "${want[@]}"; do
	case $n in
	etcd) build etcd etcd go.etcd.io/etcd/server/v3 "-s -w" ;;
	kube-apiserver | kubectl | kube-controller-manager | kube-scheduler | kubelet | kube-proxy)
		build "$n" kube "k8s.io/kubernetes/cmd/$n" "$kube_ldflags" ;;
	helm3) build helm3 helm3 helm.sh/helm/v3/cmd/helm "$helm3_ldflags" ;;
	helm4) build helm4 helm4 helm.sh/helm/v4/cmd/helm "$helm4_ldflags" ;;
	controller-gen) build controller-gen devtools sigs.k8s.io/controller-tools/cmd/controller-gen "-s -w" ;;
	# The end-to-end cluster's image tool, its pause and sample server images' binaries, and the
	# cert-manager launcher (scripts/README.md).
	mkimage) build mkimage mkimage . "-s -w" ;;
	pause | sample-server) build "$n" mkimage "./$n" "-s -w" ;;
	cert-manager)
		build cert-manager cert-manager . "-s -w"
		# Its CRDs, from the same module version, installed without cert-manager's webhook.
		crds=$(cd "$tools/cert-manager" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)/deploy/crds
		mkdir -p "$bin/cert-manager-crds"
		cp "$crds"/*.yaml "$bin/cert-manager-crds/"
		chmod 644 "$bin/cert-manager-crds"/*.yaml
		;;
	# Debian's prometheus is built without kubernetes_sd_configs; this one has only that
	# service discovery (the module's remove_all_sd/enable_kubernetes_sd tags) and no web UI.
	prometheus)
		BUILD_TAGS=remove_all_sd,enable_kubernetes_sd build prometheus prometheus github.com/prometheus/prometheus/cmd/prometheus \
			"-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_RELEASE -X github.com/prometheus/common/version.Branch=HEAD"
		;;
	ct) build_ct ;;
	golangci-lint) build golangci-lint golangci-lint sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter \
		"-s -w -X main.version=${GOLANGCI_LINT_VERSION#v}" ;;
	# kubeconform and its schemas (bin/kubeconform-schemas/<group>/<kind>_<version>.json),
	# generated offline by scripts/tools/kubeconform/schemas from Kubernetes' swagger.json and
	# the CRDs of cert-manager and prometheus-operator (ServiceMonitor, PrometheusRule), and
	# those two prometheus-operator CRDs in bin/prometheus-operator-crds.
	kubeconform)
		build kubeconform kubeconform github.com/yannh/kubeconform/cmd/kubeconform "-s -w"
		build kubeconform-schemagen kubeconform ./schemas "-s -w"
		schemas_stamp="$KUBE_VERSION|$CERT_MANAGER_VERSION|$PROMETHEUS_OPERATOR_VERSION|$(cat "$bin/.stamps/kubeconform-schemagen")"
		if [[ -d "$bin/kubeconform-schemas" && "$(cat "$bin/.stamps/kubeconform-schemas" 2>/dev/null)" == "$schemas_stamp" ]]; then
			say "kubeconform schemas: up to date"
		else
			swagger=$(cd "$tools/kube" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/api/openapi-spec/swagger.json
			cm=$(cd "$tools/cert-manager" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)/deploy/crds
			po=$(module_dir "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION")/example/prometheus-operator-crd
			"$bin/kubeconform-schemagen" -swagger "$swagger" -out "$bin/kubeconform-schemas" "$cm" "$po"
			# The two CRDs the chart renders objects of, for tests that install them (internal/chart).
			rm -rf "$bin/prometheus-operator-crds"
			mkdir -p "$bin/prometheus-operator-crds"
			cp "$po/monitoring.coreos.com_servicemonitors.yaml" "$po/monitoring.coreos.com_prometheusrules.yaml" "$bin/prometheus-operator-crds/"
			chmod 644 "$bin/prometheus-operator-crds"/*.yaml
			echo "$schemas_stamp" >"$bin/.stamps/kubeconform-schemas"
		fi
		;;
	*) echo "unknown tool $n; known: ${all[*]}" >&2; exit 2 ;;
	esac
done
say "toolchain ready in $bin"

# A run that built every tool writes bin/reports/toolchain-build.json, from which make reports
# renders the README's build time (internal/reports); partial runs write nothing.
if ((${#want[@]} == ${#all[@]})); then
	names=" "
	for b in "${built[@]}"; do names+="${b%%:*} "; done
	for n in "${all[@]}"; do [[ $names == *" $n "* ]] || exit 0; done
	mkdir -p "$root/bin/reports"
	tools_json=""
	for b in "${built[@]}"; do tools_json+="${tools_json:+, }{\"name\": \"${b%%:*}\", \"seconds\": ${b##*:}}"; done
	printf '{"date": "%s", "machine": "%s cores, %s", "goCache": "%s", "seconds": %d, "tools": [%s]}\n' \
		"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$(uname -sm)" "$cache_was" "$((SECONDS - run_start))" "$tools_json" \
		>"$root/bin/reports/toolchain-build.json"
	say "build times recorded in bin/reports/toolchain-build.json (make reports publishes them)"
fi
