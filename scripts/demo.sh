#!/usr/bin/env bash
# make demo: the whole product on a fresh machine. Builds what is missing, starts a real
# single-node cluster (scripts/README.md), starts cert-manager's real controllers, installs
# the chart at stage initial, creates Widgets through v1alpha1, walks the API upgrade
# add-version -> flip-storage -> migrate -> unserve -> remove with helm upgrade (checking after every
# step that every Widget reads the same through every served version), shows a refused unsafe
# step, and what on-call would see in Prometheus. KEEP=1 leaves the cluster running.
# Needs root, as kind needs docker. Exits non-zero if any check fails; Ctrl-C cleans up.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cluster=scripts/local-cluster.sh
ns=widget-system
release=widget-operator
chart=charts/widget-operator
bin=$root/bin

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
say() { printf '   %s\n' "$*"; }
kubectl() { "$cluster" kubectl "$@"; }
helm() { "$cluster" exec "$bin/helm3" "$@"; }
widgetctl() { "$cluster" exec "$bin/widgetctl" "$@"; }
# The local node has no cluster DNS: reach the webhook through its Service's ClusterIP (the
# certificate is still verified for the Service's name against the CRD's caBundle).
status() { widgetctl upgrade status --webhook-url "https://$(kubectl -n "$ns" get svc "$release-webhook" -o jsonpath='{.spec.clusterIP}'):443/convert"; }

if [[ $(id -u) != 0 ]]; then
	echo "make demo needs root: it runs a real Kubernetes node in a network namespace (as kind needs docker)." >&2
	exit 1
fi

# One cluster at a time on a machine: hold the lock the end-to-end tests take for the whole
# demo (scripts/local-cluster.sh), rather than tearing down a cluster a test is using.
lock=/tmp/widget-cluster.lock
if [[ ${CLUSTER_LOCK_HELD:-0} != 1 ]]; then
	if ! flock --nonblock "$lock" true; then
		echo "demo: waiting for the end-to-end tests' cluster to go down ($lock is held; \`fuser -v $lock\` shows by whom)" >&2
	fi
	CLUSTER_LOCK_HELD=1 exec flock --close -w 1800 "$lock" "$0" "$@"
fi

cleanup() {
	local rc=$?
	if [[ ${KEEP:-0} == 1 ]]; then
		step "The cluster keeps running (KEEP=1)"
		"$cluster" env | sed 's/^/   /'
		say "kubectl:  $cluster kubectl get widgets -A"
		say "stop it:  $cluster down"
	else
		step "Tearing everything down"
		"$cluster" down >/dev/null 2>&1 || true
	fi
	if [[ $rc == 0 ]]; then echo "demo: every check passed"; else echo "demo: FAILED (exit $rc)" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "1. Build what is missing (the first run builds Kubernetes from source: about 25 minutes on 2 cores; later runs take seconds)"
scripts/toolchain.sh | grep -v 'up to date' || true
make -s build image >/dev/null
say "images: $(basename "$bin/widget-operator-image.tar") (widget-manager + widgetctl, from scratch, no docker)"

step "2. A real single-node cluster: etcd, kube-apiserver, controller-manager, scheduler, containerd, kubelet, kube-proxy"
"$cluster" up >/dev/null
"$cluster" import "$bin/widget-operator-image.tar" >/dev/null
sample=localhost/widget-cluster/sample-server:v1 # the tiny HTTP server Widgets run (scripts/tools/mkimage/sample-server)
"$bin/mkimage" -o "$bin/sample-server-image.tar" -t "$sample" -port 8080/tcp "$bin/sample-server:/sample-server" >/dev/null
"$cluster" import "$bin/sample-server-image.tar" >/dev/null
kubectl get nodes -o wide

step "3. cert-manager's real controllers and cainjector (its webhook does not exist offline; CRDs installed without it)"
"$cluster" cert-manager >/dev/null

step "4. helm install at stage initial (v1alpha1 only), in a namespace enforcing Pod Security 'restricted'"
kubectl create namespace "$ns" >/dev/null
kubectl label namespace "$ns" pod-security.kubernetes.io/enforce=restricted >/dev/null
helm install "$release" "$chart" -n "$ns" --set apiUpgrade.stage=initial --wait --timeout 5m >/dev/null
kubectl -n "$ns" get deploy,pods,certificate -o wide
bundle=$(kubectl get crd widgets.widgetry.io -o jsonpath='{.spec.conversion.webhook.clientConfig.caBundle}')
[[ -n $bundle ]] || { echo "the CRD has no caBundle: cainjector did not inject it" >&2; exit 1; }
say "cainjector injected the CA into the CRD's conversion webhook (caBundle: ${#bundle} bytes)"

step "5. Widgets created through v1alpha1 (the installed base)"
kubectl create namespace shop >/dev/null
widget() { # widget NAME I: a v1alpha1 Widget
	cat <<YAML
apiVersion: widgetry.io/v1alpha1
kind: Widget
metadata: {name: $1, namespace: shop}
spec:
  image: $sample
  replicas: $2
  timeoutSeconds: $(($2 * 30))
  endpoints: [{name: http, port: 8080}]
YAML
}
# No wait needed: the chart's wait-webhooks hook held helm until a Widget passed the webhooks.
for i in 1 2 3; do
	widget "web-$i" "$i" | kubectl apply -f - >/dev/null
done
kubectl -n shop wait --for=condition=Ready widgets.v1alpha1.widgetry.io --all --timeout=3m >/dev/null
kubectl -n shop get widgets.v1alpha1.widgetry.io,deploy,svc

step "6. An unsafe step is refused: initial -> flip-storage skips add-version"
if out=$(helm upgrade "$release" "$chart" -n "$ns" --reuse-values --set apiUpgrade.stage=flip-storage --wait 2>&1); then
	echo "helm upgrade to flip-storage was not refused" >&2
	exit 1
fi
say "helm upgrade failed, as it must; the preflight hook said:"
kubectl -n "$ns" logs job/"$release"-preflight --tail=3 2>/dev/null | sed 's/^/     /'
echo "$out" | tail -1 | sed 's/^/     /'
status | sed 's/^/   /'

# unserve and remove are refused while v1alpha1 requests were served within this window: a
# kubectl still reading through v1alpha1 after migrate is refused, and the demo waits one window
# out. widgetctl verify reads through v1alpha1 too, at every stage: its requests are its own
# (recorded as sent, not counted), so it never holds the gate.
window=20s
for stage in add-version flip-storage migrate unserve remove; do
	step "7. helm upgrade --set apiUpgrade.stage=$stage"
	if [[ $stage == unserve ]]; then
		say "a backup taken now (after the flip) and its restore drill, which unserve and remove require:"
		backups=$(mktemp -d)
		widgetctl backup --out "$backups/widgets-before-unserve" | tail -1 | sed 's/^/     /'
		widgetctl restore --from "$backups/widgets-before-unserve" --drill | tail -1 | sed 's/^/     /'
		say "a client still on v1alpha1 (kubectl, reading web-1):"
		kubectl -n shop get widgets.v1alpha1.widgetry.io web-1 -o name | sed 's/^/     /'
		say "refused while v1alpha1 is still in use:"
		if out=$(helm upgrade "$release" "$chart" -n "$ns" --reuse-values --set apiUpgrade.stage=unserve \
			--set apiUpgrade.oldVersionTraffic.window=$window --wait --timeout 5m 2>&1); then
			echo "helm upgrade to unserve was not refused" >&2
			exit 1
		fi
		echo "$out" | grep -o 'v1alpha1 is still in use[^;]*' | head -1 | sed 's/^/     /'
		say "waiting out a $window window without v1alpha1 requests, checking again (through v1alpha1 too), then again:"
		sleep 22
		widgetctl verify --crd widgets.widgetry.io | sed 's/^/   /'
	fi
	helm upgrade "$release" "$chart" -n "$ns" --reuse-values --set apiUpgrade.stage="$stage" \
		--set apiUpgrade.oldVersionTraffic.window=$window --wait --timeout 5m >/dev/null
	status | sed 's/^/   /'
	widgetctl verify --crd widgets.widgetry.io | sed 's/^/   /'
	if [[ $stage == add-version ]]; then
		say "v1 only: a fractional timeout and paused, written through v1, survive v1alpha1 reads and writes:"
		kubectl -n shop patch widgets.v1.widgetry.io web-1 --type=merge -p '{"spec":{"timeout":"1.5s","paused":true}}' >/dev/null
		kubectl -n shop patch widgets.v1alpha1.widgetry.io web-1 --type=merge -p '{"spec":{"replicas":2}}' >/dev/null
		kubectl -n shop get widgets.v1.widgetry.io web-1 -o jsonpath='     web-1 through v1: size={.spec.size} timeout={.spec.timeout} paused={.spec.paused}{"\n"}'
	fi
done

step "8. What on-call sees: Prometheus scraping the manager pods (authenticated) and the apiserver"
kubectl -n "$ns" create serviceaccount prometheus >/dev/null
kubectl create clusterrolebinding demo-prometheus --clusterrole="$release-metrics-reader" --serviceaccount="$ns:prometheus" >/dev/null
token=$(mktemp); kubectl -n "$ns" create token prometheus --duration=2h >"$token"
# The manager caches an authorization denial for 30 s: start scraping once RBAC says yes.
for _ in $(seq 30); do
	[[ $(kubectl auth can-i get /metrics --as="system:serviceaccount:$ns:prometheus" 2>/dev/null) == yes ]] && break
	sleep 1
done
extra=$(mktemp)
cat >"$extra" <<YAML
- job_name: widget-operator
  scheme: https
  authorization: {credentials_file: $token}
  tls_config: {insecure_skip_verify: true}
  kubernetes_sd_configs: [{role: pod, kubeconfig_file: /tmp/widget-cluster/admin.kubeconfig, namespaces: {names: [$ns]}}]
  relabel_configs:
  - {source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name], regex: widget-operator, action: keep}
  - {source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics, action: keep}
  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}
  - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}
YAML
"$cluster" prometheus "$extra" >/dev/null
# promtool (Debian's prometheus package, which scripts/prereqs.sh demo installs) asks the API.
command -v promtool >/dev/null || { echo "demo: promtool is not on PATH, so Prometheus cannot be queried: run scripts/prereqs.sh demo (as root it installs the Debian package prometheus)" >&2; exit 1; }
query() { "$cluster" exec promtool query instant http://127.0.0.1:9090 "$1" 2>&1 | sed 's/^/     /'; }
# Wait for both manager pods to be scraped; on failure say what the last query answered
# (an error, no series, or how many pods), not a guess.
scraped=0 last=""
for _ in $(seq 60); do
	last=$(query 'count(widget_build_info{job="widget-operator"})' || true)
	if [[ $(grep -o '=> [0-9]*' <<<"$last") == "=> 2" ]]; then scraped=1; break; fi
	sleep 2
done
if [[ $scraped != 1 ]]; then
	echo "demo: after 2 minutes Prometheus (127.0.0.1:9090) does not report 2 scraped manager pods; its last answer to count(widget_build_info{job=\"widget-operator\"}) was:" >&2
	echo "${last:-     (empty: no series, so no manager pod scraped yet)}" >&2
	echo "     its targets: $("$cluster" exec promtool query instant http://127.0.0.1:9090 'up' 2>&1 | head -5)" >&2
	exit 1
fi
say "conversions answered per version pair (widget_conversion_objects_total):"
query 'sum by (from_version, to_version) (widget_conversion_objects_total)'
say "objects the migration rewrote (widget_migration_objects_total):"
query 'sum by (result) (widget_migration_objects_total)'
say "days until the serving certificate expires:"
query 'min((widget_webhook_certificate_expiry_timestamp_seconds - time()) / 86400)'
say "leader: $(query 'leader_election_master_status == 1' | grep -o 'pod="[^"]*"' | head -1)"
say "dashboards: dashboards/*.json (Grafana); alerts: dashboards/prometheus/widget-operator.rules.yaml; runbooks: runbooks/README.md"
