#!/usr/bin/env bash
# A real Kubernetes cluster of one or more nodes for the end-to-end tests and the demo, run
# offline as root, each node in a network namespace and a private mount namespace of its own
# (scripts/README.md).
#
# Usage: scripts/local-cluster.sh COMMAND
#   up                 start the cluster (a stale one is torn down first); prints the env
#                      (CLUSTER_NODES nodes, default 1)
#   down [--purge]     stop every process, remove the cgroups, the namespace and the state
#                      (logs are kept in $CLUSTER_DIR/logs unless --purge)
#   status             exit 0 if the apiserver is ready and the node is Ready
#   env                print shell exports (KUBECONFIG, CLUSTER_NETNS, CONTAINERD_ADDRESS)
#   kubectl ARGS...    kubectl against the cluster, run inside the namespace
#   exec CMD ARGS...   any command inside the namespace with KUBECONFIG set (helm, curl, ...)
#   import TAR...      import image tarballs (docker or OCI archives) into the node's containerd
#   cert-manager [GATES]  install cert-manager's CRDs and run its controllers and cainjector
#                      (bin/cert-manager) next to the cluster; health on 127.0.0.1:9403;
#                      GATES are cert-manager feature gates (e.g. CAInjectorMerging=false)
#   cert-manager-stop  stop it (SIGTERM, then SIGKILL after 10 s)
#   prometheus [EXTRA] run bin/prometheus next to the cluster on 127.0.0.1:9090, scraping
#                      annotated pods found by kubernetes_sd_configs (+ scrape_configs in EXTRA)
#   node-stop K        node K (2 to CLUSTER_NODES) stops dead, as a node lost to a kernel
#                      panic or a cut cable: its traffic dropped, its pods frozen, its kubelet,
#                      containerd and kube-proxy stopped (SIGSTOP); nothing graceful
#   node-start K       node K goes on where it stopped (undoes node-stop)
#   logs               list the component logs
#
# Environment: CLUSTER_DIR (state, default /tmp/widget-cluster), CLUSTER_NAME (namespace and
# cgroup name, default widget-cluster), CLUSTER_BIN (Kubernetes binaries, default bin/),
# CLUSTER_NODES (nodes, 1 to 9, default 1), CLUSTER_ZONES (the zones the nodes are labelled
# with, topology.kubernetes.io/zone, in turn: default "zone-a zone-b zone-c", one per node).
#
# Nodes: the first, widget-node (10.200.0.2), shares the namespace $CLUSTER_NAME with the
# control plane; node K (widget-node-K, 10.200.0.K+1) has the namespace $CLUSTER_NAME-nodeK,
# its own containerd, kubelet and kube-proxy, state in $CLUSTER_DIR/nodeK and the cgroup
# $CLUSTER_NAME-nodeK, and a veth to the first namespace (wnK there, eth0 in its own), which
# routes between the nodes' pod ranges.
#
# The apiserver listens on 10.200.0.2:6443 inside the namespace only. The host reaches it by
# entering the namespace: `local-cluster.sh kubectl ...`, `local-cluster.sh exec helm ...`, or
# `nsenter --net=/run/netns/$CLUSTER_NAME CMD`; the Go helper (internal/testenv/cluster)
# dials from inside the namespace itself.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
self="$root/scripts/local-cluster.sh"
D=${CLUSTER_DIR:-/tmp/widget-cluster}
NAME=${CLUSTER_NAME:-widget-cluster}
BIN=${CLUSTER_BIN:-$root/bin}
NETNS=/run/netns/$NAME
NODE=widget-node
NODE_IP=10.200.0.2
PEER_IP=10.200.0.1
SERVICE_CIDR=10.96.0.0/16
API_SERVICE_IP=10.96.0.1
CLUSTER_CIDR=10.244.0.0/16
POD_CIDR=10.244.0.0/24
PAUSE_IMAGE=localhost/widget-cluster/pause:v1
NODES=${CLUSTER_NODES:-1}
[[ $NODES =~ ^[1-9]$ ]] || { echo "CLUSTER_NODES=$NODES: want 1 to 9" >&2; exit 2; }
read -r -a ZONES <<<"${CLUSTER_ZONES:-zone-a zone-b zone-c}"
((${#ZONES[@]} > 0)) || { echo "CLUSTER_ZONES is empty: want one zone name or more" >&2; exit 2; }
CGROUP_CONTROLLERS=(cpu cpuacct cpuset memory devices freezer blkio pids systemd hugetlb net_cls net_prio perf_event unified)
KUBECONFIG_ADMIN=$D/admin.kubeconfig
SOCK=$D/containerd/containerd.sock

# One cluster at a time on a machine (two kubelets on the cgroupfs driver fight over their
# cgroups). The Go helper (internal/testenv/cluster, lockFile) holds this flock for a test
# binary's whole cluster, and the demo for its whole run; both set CLUSTER_LOCK_HELD=1 for the
# calls they make. Anyone else's `up` and `down` take it for their own run, so they refuse
# instead of tearing down a cluster that a test is using.
LOCK=/tmp/widget-cluster.lock

say() { printf '[local-cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 1; }
in_ns() { nsenter --net="$NETNS" "$@"; }

# Node K's name, address, namespace (also its cgroup's name), state directory and zone. The
# first node keeps the single-node cluster's names and paths.
node_name() { if (($1 == 1)); then echo "$NODE"; else echo "$NODE-$1"; fi; }
node_ip() { echo "10.200.0.$(($1 + 1))"; }
node_ns() { if (($1 == 1)); then echo "$NAME"; else echo "$NAME-node$1"; fi; }
node_dir() { if (($1 == 1)); then echo "$D"; else echo "$D/node$1"; fi; }
node_zone() { echo "${ZONES[($1 - 1) % ${#ZONES[@]}]}"; }

# cluster_names prints the namespace and cgroup name of every node present on the machine,
# the first node's first: down and the leftover check find the nodes of a cluster started
# with any CLUSTER_NODES.
cluster_names() {
	echo "$NAME"
	local f
	for f in /run/netns/"$NAME"-node[0-9] /sys/fs/cgroup/*/"$NAME"-node[0-9]; do
		if [[ -e $f ]]; then basename "$f"; fi
	done | sort -u
}

check_prereqs() {
	# Root, the Debian packages and the right to make namespaces: one check for every caller.
	PREREQS_NO_INSTALL=1 MAKE_VERB="scripts/local-cluster.sh" "$root/scripts/prereqs.sh" e2e >/dev/null || exit 1
	local missing=()
	for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl mkimage pause; do
		[[ -x $BIN/$b ]] || missing+=("$b")
	done
	((${#missing[@]} == 0)) || die "missing ${missing[*]} in $BIN: run scripts/toolchain.sh (make tools)"
}

# with_lock ARGS...: rerun this script with ARGS under the machine-wide cluster lock, unless
# the caller holds it already.
with_lock() {
	[[ ${CLUSTER_LOCK_HELD:-0} == 1 ]] && return 0
	flock --nonblock "$LOCK" true ||
		die "another user holds $LOCK (an end-to-end test or the demo: \`fuser -v $LOCK\` shows which); its cluster is in use: wait until it ends"
	CLUSTER_LOCK_HELD=1 exec flock --close -w 60 "$LOCK" "$self" "$@"
}

# ---------------------------------------------------------------------------------------------
# PKI: one CA signs everything; EC keys are quick to make.

cert() { # cert NAME CN [O] [SANS]
	local name=$1 cn=$2 o=${3:-} san=${4:-}
	local subj="/CN=$cn"
	[[ -z $o ]] || subj="/O=$o$subj"
	openssl ecparam -name prime256v1 -genkey -noout -out "$D/pki/$name.key" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		[[ -z $san ]] || echo "subjectAltName=$san"
	} >"$D/pki/$name.ext"
	openssl req -new -key "$D/pki/$name.key" -subj "$subj" 2>/dev/null |
		openssl x509 -req -CA "$D/pki/ca.crt" -CAkey "$D/pki/ca.key" -CAcreateserial -days 365 \
			-extfile "$D/pki/$name.ext" -out "$D/pki/$name.crt" 2>/dev/null
}

kubeconfig() { # kubeconfig FILE CERTNAME
	cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster:
    server: https://$NODE_IP:6443
    certificate-authority: $D/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $D/pki/$2.crt
    client-key: $D/pki/$2.key
contexts:
- name: $NAME
  context: {cluster: $NAME, user: $2}
current-context: $NAME
EOF
}

make_pki() {
	mkdir -p "$D/pki"
	openssl ecparam -name prime256v1 -genkey -noout -out "$D/pki/ca.key" 2>/dev/null
	openssl req -x509 -new -key "$D/pki/ca.key" -subj "/CN=$NAME-ca" -days 3650 -out "$D/pki/ca.crt" 2>/dev/null
	cert apiserver kube-apiserver "" \
		"IP:$NODE_IP,IP:$API_SERVICE_IP,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert admin kubernetes-admin system:masters
	cert controller-manager system:kube-controller-manager
	cert scheduler system:kube-scheduler
	cert kube-proxy system:kube-proxy
	cert kubelet "system:node:$NODE" system:nodes "IP:$NODE_IP,DNS:$NODE"
	local k
	for ((k = 2; k <= NODES; k++)); do
		cert "kubelet-node$k" "system:node:$(node_name "$k")" system:nodes "IP:$(node_ip "$k"),DNS:$(node_name "$k")"
		kubeconfig "$D/kubelet-node$k.kubeconfig" "kubelet-node$k"
	done
	openssl genrsa -out "$D/pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$D/pki/sa.key" -pubout -out "$D/pki/sa.pub" 2>/dev/null
	kubeconfig "$KUBECONFIG_ADMIN" admin
	for c in controller-manager scheduler kube-proxy kubelet; do kubeconfig "$D/$c.kubeconfig" "$c"; done
}

# ---------------------------------------------------------------------------------------------
# Configuration files.

write_configs() {
	echo "nameserver $PEER_IP" >"$D/resolv.conf"
	local k
	for ((k = 1; k <= NODES; k++)); do write_node_configs "$k"; done
	# The first node's pod range is the first that kube-controller-manager allocates: it
	# registers before the others start. The others' come from their Node (start_nodes).
	write_cni 1 "$POD_CIDR"
}

# write_cni K CIDR: node K's CNI network, a bridge over CIDR (its Node's spec.podCIDR).
# containerd watches the directory: the node turns Ready once the file is there.
write_cni() {
	local dir
	dir=$(node_dir "$1")
	cat >"$dir/cni/net.d/.10-widget.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "widget-pods",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$dir/cni/ipam", "ranges": [[{"subnet": "$2"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
	mv "$dir/cni/net.d/.10-widget.conflist" "$dir/cni/net.d/10-widget.conflist"
}

# write_node_configs K: node K's containerd, kubelet and kube-proxy configuration.
write_node_configs() {
	local k=$1 dir name ns certname
	dir=$(node_dir "$k") name=$(node_name "$k") ns=$(node_ns "$k")
	certname=kubelet
	((k == 1)) || certname=kubelet-node$k
	mkdir -p "$dir/cni/net.d" "$dir/containerd" "$dir/kubelet" "$dir/varlog/pods" "$dir/varlog/containers"
	# restrict_oom_score_adj: without CAP_SYS_RESOURCE every sandbox fails with "can't get final
	# child's PID from pipe: EOF" (nsexec cannot lower oom_score_adj).
	cat >"$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$dir/containerd/containerd.sock"
[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
EOF
	cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /$ns
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$dir/containerd/containerd.sock
podLogsDir: /var/log/pods
address: 0.0.0.0
port: 10250
healthzBindAddress: 127.0.0.1
healthzPort: 10248
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $D/pki/ca.crt}
authorization:
  mode: Webhook
tlsCertFile: $D/pki/$certname.crt
tlsPrivateKeyFile: $D/pki/$certname.key
resolvConf: $D/resolv.conf
clusterDomain: cluster.local
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerNode: true
staticPodPath: ""
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
EOF
	cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $name
clusterCIDR: $CLUSTER_CIDR
clientConnection: {kubeconfig: $D/kube-proxy.kubeconfig}
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

# ---------------------------------------------------------------------------------------------
# Network namespace: lo, a veth pair with both ends inside (this kernel has no dummy driver),
# the node IP, a default route that leads nowhere, forwarding on.

make_netns() {
	# `ip netns add` turns /run/netns into a mount point if it is not one; down undoes that.
	mountpoint -q /run/netns 2>/dev/null || touch "$D/run-netns-mounted-by-us"
	ip netns add "$NAME"
	ip -n "$NAME" link set lo up
	ip -n "$NAME" link add wc0 type veth peer name wc1
	ip -n "$NAME" addr add "$NODE_IP/24" dev wc0
	ip -n "$NAME" addr add "$PEER_IP/24" dev wc1
	ip -n "$NAME" link set wc0 up
	ip -n "$NAME" link set wc1 up
	ip -n "$NAME" route add default via "$PEER_IP" dev wc0
	# /proc/sys/net is the caller's namespace's: nsenter, not `ip netns exec` (which remounts
	# /sys and loses /sys/fs/cgroup).
	in_ns sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
	modprobe br_netfilter 2>/dev/null || true
	# shellcheck disable=SC2016 # $f is the inner shell's variable
	in_ns sh -c 'f=/proc/sys/net/bridge/bridge-nf-call-iptables; [ ! -e $f ] || echo 1 >$f'
}

# make_node_netns K: node K's namespace, joined to the first node's by a veth (wnK there,
# eth0 here). The first namespace routes: node K's address and, once known, its pod range
# (route_pods) lead through wnK; node K's default route leads to the first node, so its pods
# reach the control plane, Services and every other node through it. The first node's
# address stays on wc0: the kernel answers ARP for it on wnK too.
make_node_netns() {
	local k=$1 ns ip
	ns=$(node_ns "$k") ip=$(node_ip "$k")
	ip netns add "$ns"
	ip -n "$ns" link set lo up
	ip link add "wn$k" netns "$NAME" type veth peer name eth0 netns "$ns"
	# A /32: with the /24 on-link, node K would ARP for the other nodes on eth0, where no one
	# answers for them.
	ip -n "$ns" addr add "$ip/32" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$NAME" link set "wn$k" up
	ip -n "$NAME" route add "$ip/32" dev "wn$k"
	ip -n "$ns" route add "$NODE_IP/32" dev eth0
	ip -n "$ns" route add default via "$NODE_IP" dev eth0
	nsenter --net="/run/netns/$ns" sh -c 'echo 1 >/proc/sys/net/ipv4/ip_forward'
	# shellcheck disable=SC2016 # $f is the inner shell's variable
	nsenter --net="/run/netns/$ns" sh -c 'f=/proc/sys/net/bridge/bridge-nf-call-iptables; [ ! -e $f ] || echo 1 >$f'
}

# route_pods K CIDR: the first namespace sends node K's pod range to node K.
route_pods() {
	ip -n "$NAME" route replace "$2" via "$(node_ip "$1")" dev "wn$1"
}

make_cgroups() {
	# kubelet's cgroupRoot: everything node K runs lives under /$(node_ns K), so down can
	# find it and two nodes or clusters never share /kubepods.
	local c k ns
	for ((k = 1; k <= NODES; k++)); do
		ns=$(node_ns "$k")
		for c in "${CGROUP_CONTROLLERS[@]}"; do
			[[ -d /sys/fs/cgroup/$c ]] || continue
			mkdir -p "/sys/fs/cgroup/$c/$ns"
			if [[ $c == cpuset ]]; then
				cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$ns/cpuset.cpus"
				cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$ns/cpuset.mems"
			fi
		done
	done
}

# ---------------------------------------------------------------------------------------------
# Inside the namespaces: `up` re-executes this script as `_inside` under
# `nsenter --net=… unshare --mount --propagation private`, so every component shares one
# private mount namespace (kubelet's volume mounts must be visible to containerd and runc).

start() { # start NAME CMD ARGS...: run in the background, log and pid under $D
	local name=$1
	shift
	setsid "$@" >>"$D/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$D/pids/$name.pid"
}

wait_for() { # wait_for WHAT SECONDS CMD...
	local what=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	die "$what not ready after ${secs}s; see $D/logs"
}

# node_mounts K: a private /run (containerd's shim sockets, pod network namespaces), /var/lib
# (CNI cache) and /var/log (pod logs, kept in node K's varlog) in node K's mount namespace:
# nothing lands on the host's, and no node sees another's.
node_mounts() {
	local dir
	dir=$(node_dir "$1")
	mount -t tmpfs -o mode=755 tmpfs /run
	mkdir -p /run/containerd /run/netns
	# The kubelet's cAdvisor finds containerd at its default socket only; without it the
	# kubelet's /metrics/cadvisor has no pod or container labels (the dashboards' CPU and
	# memory panels select by them).
	ln -s "$dir/containerd/containerd.sock" /run/containerd/containerd.sock
	mount -t tmpfs -o mode=755 tmpfs /var/lib
	mkdir -p /var/lib/cni
	mount --bind "$dir/varlog" /var/log
	# Names resolve to nothing outside: no lookup leaves the namespace.
	mount --bind "$D/resolv.conf" /etc/resolv.conf
}

# node_suffix K: what node K's process names (logs, pids) end with; none for the first node.
node_suffix() { if (($1 == 1)); then echo ""; else echo "-node$1"; fi; }

start_containerd() { # start_containerd K
	start "containerd$(node_suffix "$1")" containerd --config "$(node_dir "$1")/containerd/config.toml"
}

# start_node K: node K's kubelet and kube-proxy, once its containerd answers and holds the
# pause image. The kubelet labels its Node with its zone (NodeRestriction allows
# topology.kubernetes.io/zone).
start_node() {
	local k=$1 dir sfx kc sock
	dir=$(node_dir "$k") sfx=$(node_suffix "$k")
	sock=$dir/containerd/containerd.sock
	kc=$D/kubelet.kubeconfig
	((k == 1)) || kc=$D/kubelet-node$k.kubeconfig
	wait_for "containerd$sfx" 30 ctr --address "$sock" version
	ctr --address "$sock" -n k8s.io images import --no-unpack=false "$D/images/pause.tar" >>"$D/logs/images.log" 2>&1 ||
		die "importing the pause image into node $k failed; see $D/logs/images.log"
	start "kubelet$sfx" "$BIN/kubelet" \
		--config "$dir/kubelet/config.yaml" \
		--kubeconfig "$kc" \
		--root-dir "$dir/kubelet" --cert-dir "$dir/kubelet/pki" \
		--hostname-override "$(node_name "$k")" --node-ip "$(node_ip "$k")" \
		--node-labels "topology.kubernetes.io/zone=$(node_zone "$k")" --v 2
	start "kube-proxy$sfx" "$BIN/kube-proxy" --config "$dir/kube-proxy.yaml" --v 2
}

# inside: the control plane and the first node, in the first namespace.
inside() {
	node_mounts 1
	local k="$BIN"
	start etcd "$k/etcd" --name "$NODE" --data-dir "$D/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster "$NODE=http://127.0.0.1:2380" --unsafe-no-fsync --listen-metrics-urls http://127.0.0.1:2381
	start_containerd 1
	start kube-apiserver "$k/kube-apiserver" \
		--etcd-servers http://127.0.0.1:2379 \
		--bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--tls-cert-file "$D/pki/apiserver.crt" --tls-private-key-file "$D/pki/apiserver.key" \
		--client-ca-file "$D/pki/ca.crt" \
		--kubelet-client-certificate "$D/pki/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$D/pki/apiserver-kubelet-client.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$D/pki/sa.pub" \
		--service-account-signing-key-file "$D/pki/sa.key" \
		--authorization-mode Node,RBAC \
		--enable-admission-plugins NodeRestriction \
		--allow-privileged=true \
		--kubelet-preferred-address-types InternalIP \
		--profiling=false
	wait_for kube-apiserver 90 "$k/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" get --raw /readyz
	start kube-controller-manager "$k/kube-controller-manager" \
		--kubeconfig "$D/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$D/controller-manager.kubeconfig" \
		--authorization-kubeconfig "$D/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
		--allocate-node-cidrs --cluster-cidr "$CLUSTER_CIDR" --node-cidr-mask-size 24 \
		--service-cluster-ip-range "$SERVICE_CIDR" \
		--root-ca-file "$D/pki/ca.crt" \
		--service-account-private-key-file "$D/pki/sa.key" \
		--use-service-account-credentials \
		--cluster-signing-cert-file "$D/pki/ca.crt" --cluster-signing-key-file "$D/pki/ca.key"
	start kube-scheduler "$k/kube-scheduler" \
		--kubeconfig "$D/scheduler.kubeconfig" \
		--authentication-kubeconfig "$D/scheduler.kubeconfig" \
		--authorization-kubeconfig "$D/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false
	start_node 1
}

# inside_node K: node K, in its own namespaces.
inside_node() {
	node_mounts "$1"
	start_containerd "$1"
	start_node "$1"
}

# ---------------------------------------------------------------------------------------------

cmd_up() {
	check_prereqs
	if [[ -e $NETNS || -d $D/pids || -n $(cluster_names | tail -n +2) ]]; then
		say "tearing down a previous cluster first"
		cmd_down
	fi
	local t0=$SECONDS
	rm -rf "$D"
	mkdir -p "$D/logs" "$D/pids" "$D/images"
	make_pki
	write_configs
	"$BIN/mkimage" -o "$D/images/pause.tar" -t "$PAUSE_IMAGE" -label org.opencontainers.image.title=pause \
		"$BIN/pause:/pause" >>"$D/logs/images.log"
	make_netns
	local k
	for ((k = 2; k <= NODES; k++)); do make_node_netns "$k"; done
	make_cgroups
	CLUSTER_DIR=$D CLUSTER_NAME=$NAME CLUSTER_BIN=$BIN \
		nsenter --net="$NETNS" unshare --mount --propagation private -- "$self" _inside \
		>>"$D/logs/up.log" 2>&1 || { say "starting the components failed:"; tail -5 "$D/logs/up.log" >&2; exit 1; }
	say "control plane up in $((SECONDS - t0))s; waiting for $NODES node(s)"
	local kc=("$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN")
	if ((NODES > 1)); then
		# The first node registers first, so that it gets the first pod range (its CNI's).
		wait_for "node $NODE to register" 60 has_pod_cidr 1
		for ((k = 2; k <= NODES; k++)); do
			CLUSTER_DIR=$D CLUSTER_NAME=$NAME CLUSTER_BIN=$BIN \
				nsenter --net="/run/netns/$(node_ns "$k")" unshare --mount --propagation private -- "$self" _inside_node "$k" \
				>>"$D/logs/up.log" 2>&1 || { say "starting node $k failed:"; tail -5 "$D/logs/up.log" >&2; exit 1; }
		done
		local cidr
		for ((k = 2; k <= NODES; k++)); do
			wait_for "node $(node_name "$k") to register" 60 has_pod_cidr "$k"
			cidr=$(pod_cidr "$k")
			write_cni "$k" "$cidr"
			route_pods "$k" "$cidr"
		done
	fi
	for ((k = 1; k <= NODES; k++)); do
		wait_for "node $(node_name "$k")" 120 in_ns "${kc[@]}" wait --for=condition=Ready "node/$(node_name "$k")" --timeout=1s
	done
	wait_for "default ServiceAccount" 60 in_ns "${kc[@]}" get serviceaccount default -n default
	say "cluster up in $((SECONDS - t0))s"
	cmd_env
}

# pod_cidr K prints node K's spec.podCIDR (kube-controller-manager allocates it on
# registration); has_pod_cidr K succeeds once there is one.
pod_cidr() {
	in_ns "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" get node "$(node_name "$1")" -o 'jsonpath={.spec.podCIDR}' 2>/dev/null
}
has_pod_cidr() { [[ -n $(pod_cidr "$1") ]]; }

# pids_in_cluster prints every process of the cluster: those in its network namespace
# (control plane, containerd, shims, processes started next to it) and those in its cgroups
# (containers). It leaves out this script and its ancestors (a Go test may have a thread
# inside the namespace).
pids_in_cluster() {
	local skip=" $$ " p=$$
	while [[ $p -gt 1 ]]; do
		p=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || echo 1)
		skip+="$p "
	done
	local names
	names=$(cluster_names)
	{
		local c n
		for n in $names; do
			[[ -e /run/netns/$n ]] && ip netns pids "$n" 2>/dev/null
			for c in "${CGROUP_CONTROLLERS[@]}"; do
				[[ -d /sys/fs/cgroup/$c/$n ]] || continue
				find "/sys/fs/cgroup/$c/$n" -name cgroup.procs -exec cat {} + 2>/dev/null
			done
		done
	} | sort -un | while read -r pid; do
		[[ -d /proc/$pid && $skip != *" $pid "* ]] && echo "$pid"
	done
	return 0
}

# node_arg K: K names a node other than the first (which holds the control plane) that is up.
node_arg() {
	[[ ${1:-} =~ ^[2-9]$ ]] || die "want a node number from 2 to 9 (the first node holds the control plane), not '${1:-}'"
	[[ -e /run/netns/$(node_ns "$1") ]] || die "node $1 ($(node_name "$1")) is not up"
}

# node_drops K: the first namespace's rules that drop every packet to or from node K, which
# is all node K's traffic: it reaches the control plane and every other node through it.
node_drops() { printf '%s\n' "INPUT -i wn$1" "OUTPUT -o wn$1" "FORWARD -i wn$1" "FORWARD -o wn$1"; }

# freeze CGROUP STATE: freezes (FROZEN) or thaws (THAWED) everything in the cgroup CGROUP (a
# node's: the kubelet keeps its pods under its cgroupRoot, /$(node_ns K)), through cgroup v1's
# freezer or v2's cgroup.freeze; fails when the machine has neither for it.
freeze() {
	local f=/sys/fs/cgroup/freezer/$1/freezer.state
	if [[ -e $f ]]; then
		echo "$2" >"$f"
	elif [[ -e /sys/fs/cgroup/$1/cgroup.freeze ]]; then
		if [[ $2 == FROZEN ]]; then echo 1; else echo 0; fi >"/sys/fs/cgroup/$1/cgroup.freeze"
	else
		return 1
	fi
}

# node-stop K: node K stops dead. Dropped packets (no reset, no ICMP) make every connection to
# it hang, as to a lost machine; its processes (kubelet, containerd and its shims, kube-proxy,
# hostNetwork pods: everything in its network namespace) get SIGSTOP and its pods' cgroups
# are frozen, so nothing on it acts or answers until node-start.
cmd_node_stop() {
	node_arg "${1:-}"
	local rule
	while read -r rule; do
		# shellcheck disable=SC2086 # the rule's words
		in_ns iptables -w -C $rule -j DROP 2>/dev/null || in_ns iptables -w -I $rule -j DROP
	done < <(node_drops "$1")
	# shellcheck disable=SC2046 # one PID per word
	kill -STOP $(ip netns pids "$(node_ns "$1")") 2>/dev/null || true
	freeze "$(node_ns "$1")" FROZEN || die "no freezer for node $1: neither cgroup v1's freezer nor cgroup v2's cgroup.freeze"
	say "node $1 ($(node_name "$1")) stopped dead: its traffic dropped, its processes stopped, its pods frozen"
}

cmd_node_start() {
	node_arg "${1:-}"
	local rule
	freeze "$(node_ns "$1")" THAWED || die "no freezer for node $1: neither cgroup v1's freezer nor cgroup v2's cgroup.freeze"
	# shellcheck disable=SC2046 # one PID per word
	kill -CONT $(ip netns pids "$(node_ns "$1")") 2>/dev/null || true
	while read -r rule; do
		# shellcheck disable=SC2086 # the rule's words
		while in_ns iptables -w -C $rule -j DROP 2>/dev/null; do in_ns iptables -w -D $rule -j DROP; done
	done < <(node_drops "$1")
	say "node $1 ($(node_name "$1")) goes on: its traffic flows, its processes and pods run"
}

cmd_down() {
	[[ $(id -u) == 0 ]] || die "must run as root"
	local pids i
	# The state is thrown away, so nothing needs a graceful stop: SIGKILL kubelet first so it
	# restarts nothing, then every process of the cluster until none is left (a container's
	# processes are found through the cgroups even after its shim is gone).
	local n pid f names
	names=$(cluster_names)
	# A stopped node (node-stop) is thawed first: a frozen process does not die of SIGKILL.
	for n in $names; do freeze "$n" THAWED || true; done
	for f in "$D"/pids/kubelet*.pid "$D"/pids/kube-proxy*.pid; do
		pid=$(cat "$f" 2>/dev/null) || continue
		# only if that pid is still ours (not reused after a crash)
		if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$D/"; then
			kill -9 "$pid" 2>/dev/null || true
		fi
	done
	for ((i = 0; i < 50; i++)); do
		pids=$(pids_in_cluster)
		[[ -n $pids ]] || break
		# shellcheck disable=SC2086 # one PID per word
		kill -9 $pids 2>/dev/null || true
		sleep 0.1
	done
	[[ -z $(pids_in_cluster) ]] || die "processes left: $(pids_in_cluster | tr '\n' ' ')"
	for ((i = 0; i < 20; i++)); do
		local left=0 c
		for n in $names; do
			for c in "${CGROUP_CONTROLLERS[@]}"; do
				[[ -d /sys/fs/cgroup/$c/$n ]] || continue
				find "/sys/fs/cgroup/$c/$n" -depth -type d -exec rmdir {} + 2>/dev/null || left=1
			done
		done
		((left)) || break
		sleep 0.2
	done
	# The other nodes' namespaces first: deleting one removes its veth from the first's.
	for n in $names; do
		[[ $n == "$NAME" || ! -e /run/netns/$n ]] || ip netns del "$n"
	done
	[[ ! -e $NETNS ]] || ip netns del "$NAME"
	if [[ -e $D/run-netns-mounted-by-us ]] && [[ -z $(ls -A /run/netns 2>/dev/null) ]]; then
		if umount /run/netns 2>/dev/null; then rmdir /run/netns 2>/dev/null || true; fi
	fi
	if [[ -d $D ]]; then
		if [[ ${1:-} == --purge ]]; then
			rm -rf "$D"
		else
			find "$D" -mindepth 1 -maxdepth 1 ! -name logs ! -name varlog -exec rm -rf {} +
		fi
	fi
	local leftover
	leftover=$(leftovers)
	[[ -z $leftover ]] || die "left behind: $leftover"
	say "cluster down"
}

# leftovers names anything of the cluster still present; empty when clean.
leftovers() {
	local out=() c n
	for n in $(cluster_names); do
		[[ ! -e /run/netns/$n ]] || out+=("namespace /run/netns/$n")
		for c in "${CGROUP_CONTROLLERS[@]}"; do
			[[ ! -d /sys/fs/cgroup/$c/$n ]] || out+=("cgroup /sys/fs/cgroup/$c/$n")
		done
	done
	[[ -z $(pids_in_cluster) ]] || out+=("processes $(pids_in_cluster | tr '\n' ' ')")
	grep -qF " $D/" /proc/self/mountinfo && out+=("mounts under $D")
	echo "${out[*]}"
}

cmd_status() {
	[[ -e $NETNS ]] || { echo "down"; return 1; }
	in_ns "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" get --raw /readyz >/dev/null 2>&1 || { echo "apiserver not ready"; return 1; }
	in_ns "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" get nodes
}

cmd_env() {
	cat <<EOF
export KUBECONFIG=$KUBECONFIG_ADMIN
export CLUSTER_NETNS=$NETNS
export CLUSTER_DIR=$D
export CONTAINERD_ADDRESS=$SOCK
# the apiserver ($NODE_IP:6443) is reachable inside the namespace only:
#   nsenter --net=$NETNS kubectl get nodes   (or: $self kubectl get nodes)
EOF
}

# import TAR...: into every node's containerd, the nodes in parallel.
cmd_import() {
	local t sock pids=() socks=() i failed=()
	for sock in "$SOCK" "$D"/node[0-9]/containerd/containerd.sock; do
		[[ -S $sock ]] || continue
		socks+=("$sock")
		(for t in "$@"; do ctr --address "$sock" -n k8s.io images import "$t" || exit 1; done) &
		pids+=($!)
	done
	((${#socks[@]} > 0)) || die "no node's containerd is running: is the cluster up?"
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed+=("${socks[$i]}")
	done
	((${#failed[@]} == 0)) || die "importing $* failed into ${failed[*]}"
}

# http_ok PATH PORT: whether 127.0.0.1:PORT inside the namespace answers PATH with 200
# (bash's /dev/tcp: no curl needed).
http_ok() {
	in_ns bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$2"' && printf "GET '"$1"' HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && head -1 <&3 | grep -q " 200 "' 2>/dev/null
}

# start_next_to NAME CMD ARGS...: a process inside the namespace, next to the cluster
# (down stops it with the rest), logging to $D/logs/NAME.log.
start_next_to() {
	local name=$1
	shift
	nsenter --net="$NETNS" setsid "$@" >>"$D/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$D/pids/$name.pid"
}

# cert-manager: its CRDs (without its webhook, which cannot run here) and bin/cert-manager,
# the launcher of its real controllers and cainjector, health on 127.0.0.1:9403.
cmd_cert_manager() {
	local gates=${1:-}
	[[ -e $NETNS ]] || die "the cluster is not up"
	[[ -x $BIN/cert-manager && -d $BIN/cert-manager-crds ]] || die "$BIN/cert-manager missing: run scripts/toolchain.sh cert-manager"
	if http_ok /readyz 9403; then
		say "cert-manager already running"
		return
	fi
	local kc=("$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN")
	# Server-side: the Certificate CRD is too large for client-side apply's annotation.
	in_ns "${kc[@]}" apply --server-side --force-conflicts -f "$BIN/cert-manager-crds" >>"$D/logs/cert-manager.log"
	in_ns "${kc[@]}" wait --for=condition=Established --timeout=60s crd/certificates.cert-manager.io \
		crd/certificaterequests.cert-manager.io crd/issuers.cert-manager.io crd/clusterissuers.cert-manager.io >/dev/null
	in_ns "${kc[@]}" get namespace cert-manager >/dev/null 2>&1 || in_ns "${kc[@]}" create namespace cert-manager >/dev/null
	start_next_to cert-manager "$BIN/cert-manager" --kubeconfig "$KUBECONFIG_ADMIN" \
		--health-addr 127.0.0.1:9403 --cluster-resource-namespace cert-manager --feature-gates "$gates"
	wait_for cert-manager 60 http_ok /readyz 9403
	say "cert-manager controllers and cainjector running (log: $D/logs/cert-manager.log)"
}

# cert-manager-stop: the launcher started by cert-manager, stopped by its PID.
cmd_cert_manager_stop() {
	local pid i
	pid=$(cat "$D/pids/cert-manager.pid" 2>/dev/null) || { say "cert-manager is not running"; return; }
	if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$BIN/cert-manager"; then
		kill "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			[[ -d /proc/$pid ]] || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$D/pids/cert-manager.pid"
	say "cert-manager stopped"
}

# prometheus [EXTRA.yml]: bin/prometheus on 127.0.0.1:9090, scraping every 5s the pods
# annotated prometheus.io/scrape: "true" (port prometheus.io/port, path prometheus.io/path)
# found through kubernetes_sd_configs, plus the scrape_configs list items in EXTRA.yml.
cmd_prometheus() {
	[[ -e $NETNS ]] || die "the cluster is not up"
	[[ -x $BIN/prometheus ]] || die "$BIN/prometheus missing: run scripts/toolchain.sh prometheus"
	if http_ok /-/ready 9090; then
		say "prometheus already running"
		return
	fi
	mkdir -p "$D/prometheus"
	cat >"$D/prometheus/prometheus.yml" <<EOF
# A scrape may take its whole interval: on a busy 2-core machine an authenticated /metrics
# (a TokenReview, a SubjectAccessReview) or the apiserver's own takes more than a second.
global: {scrape_interval: 5s, scrape_timeout: 5s, evaluation_interval: 2s}
scrape_configs:
- job_name: pods
  kubernetes_sd_configs:
  - role: pod
    kubeconfig_file: $KUBECONFIG_ADMIN
  relabel_configs:
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
    action: keep
    regex: "true"
  - source_labels: [__meta_kubernetes_pod_phase]
    action: drop
    regex: Pending|Succeeded|Failed
  - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
    action: replace
    regex: (.+)
    target_label: __metrics_path__
  - source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]
    action: replace
    regex: ([^:]+)(?::\d+)?;(\d+)
    replacement: \$1:\$2
    target_label: __address__
  - source_labels: [__meta_kubernetes_namespace]
    target_label: namespace
  - source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
EOF
	[[ -z ${1:-} ]] || cat "$1" >>"$D/prometheus/prometheus.yml"
	start_next_to prometheus "$BIN/prometheus" --config.file="$D/prometheus/prometheus.yml" \
		--storage.tsdb.path="$D/prometheus/data" --web.listen-address=127.0.0.1:9090 --web.enable-lifecycle
	wait_for prometheus 60 http_ok /-/ready 9090
	say "prometheus on 127.0.0.1:9090 inside the namespace (log: $D/logs/prometheus.log)"
}

case ${1:-} in
up) with_lock "$@"; cmd_up ;;
down) with_lock "$@"; shift; cmd_down "$@" ;;
status) cmd_status ;;
env) cmd_env ;;
kubectl) shift; exec nsenter --net="$NETNS" "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@" ;;
exec) shift; KUBECONFIG=$KUBECONFIG_ADMIN exec nsenter --net="$NETNS" "$@" ;;
import) shift; cmd_import "$@" ;;
node-stop) cmd_node_stop "${2:-}" ;;
node-start) cmd_node_start "${2:-}" ;;
logs) ls -l "$D/logs" ;;
cert-manager) shift; cmd_cert_manager "$@" ;;
cert-manager-stop) cmd_cert_manager_stop ;;
prometheus) shift; cmd_prometheus "$@" ;;
_inside) inside ;;
_inside_node) inside_node "$2" ;;
*) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
