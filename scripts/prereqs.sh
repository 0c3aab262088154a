#!/usr/bin/env bash
# Checks, in seconds and before any build, what a make verb needs from the machine, and
# installs the missing Debian packages when it can (root on Debian or Ubuntu). Everything
# that can be known at the first second is checked here, so that nothing fails after the
# 25-minute toolchain build for a reason that was knowable before it.
#
# Usage: scripts/prereqs.sh TIER...   (TIER: unit, envtest, e2e, demo, lint, all)
#   unit     Go only
#   envtest  + the Debian tools the envtest tier runs (promtool, yamllint)
#   e2e      + root, the node's packages (containerd, runc, CNI plugins, iptables, ...), and
#              the right to create network namespaces
#   demo     + root and what the demo runs: the node's packages and promtool (its queries)
#   lint     + shellcheck
#   all      everything (make test)
#
# The packages and what proves each is installed are listed in scripts/apt-packages.txt.
# PREREQS_NO_INSTALL=1 reports what is missing without installing it.
# Exit codes: 0 ready, 1 something is missing (the message says exactly what to run).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
list="$root/scripts/apt-packages.txt"

say() { printf '[prereqs] %s\n' "$*"; }
die() {
	printf '[prereqs] %s\n' "$*" >&2
	exit 1
}

(($# > 0)) || set -- all
declare -A want=([all]=1)
needs_root=0
for tier in "$@"; do
	case $tier in
	unit) ;;
	envtest | lint) want[$tier]=1 ;;
	e2e | demo)
		want[$tier]=1
		needs_root=1
		;;
	all)
		want[envtest]=1 want[lint]=1 want[e2e]=1 want[demo]=1
		needs_root=1
		;;
	*) die "unknown tier '$tier' (want: unit, envtest, e2e, demo, lint or all)" ;;
	esac
done
verb="${MAKE_VERB:-scripts/prereqs.sh $*}"

# present CHECK: a command on PATH, or an absolute path that exists.
present() {
	if [[ $1 == /* ]]; then [[ -e $1 ]]; else command -v "$1" >/dev/null 2>&1; fi
}

# wanted VERBS: whether one of the comma-separated verbs is wanted.
wanted() {
	local v verbs
	IFS=, read -ra verbs <<<"$1"
	for v in "${verbs[@]}"; do
		[[ -n ${want[$v]:-} ]] && return 0
	done
	return 1
}

# missing_packages: the packages of the wanted tiers of which something is not there.
missing_packages() {
	local pkg checks tiers check
	while read -r pkg checks tiers; do
		[[ -z $pkg || $pkg == \#* ]] && continue
		wanted "$tiers" || continue
		IFS=, read -ra checks <<<"$checks"
		for check in "${checks[@]}"; do
			if ! present "$check"; then
				printf '%s\n' "$pkg"
				break
			fi
		done
	done <"$list"
}

# Go: the version go.mod asks for (a newer Go is fine; an older one fails to build it all).
command -v go >/dev/null || die "Go is missing: install Go $(awk '/^go /{print $2}' "$root/go.mod") or newer from https://go.dev/dl and put it on PATH"
need_go=$(awk '/^go /{print $2}' "$root/go.mod")
have_go=$(go env GOVERSION | sed 's/^go//')
if [[ $(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -1) != "$need_go" ]]; then
	die "Go $have_go is older than the $need_go that go.mod asks for: install Go $need_go or newer"
fi

# Root first: without it nothing below can be installed or run, and the answer is one line.
euid=$(id -u)
if ((needs_root)) && [[ $euid != 0 ]]; then
	die "$verb needs root (the end-to-end tier and the demo run a real Kubernetes node in a network namespace, as kind needs docker): run sudo $verb"
fi

mapfile -t missing < <(missing_packages)
if ((${#missing[@]} > 0)); then
	install="apt-get install -y --no-install-recommends ${missing[*]}"
	if ! command -v apt-get >/dev/null; then
		die "$verb needs these Debian packages, and this is not a Debian or Ubuntu machine (no apt-get): install their equivalents, then rerun: ${missing[*]}"
	fi
	if [[ $euid != 0 ]]; then
		die "$verb needs Debian packages that are missing: run sudo $install"
	fi
	if [[ ${PREREQS_NO_INSTALL:-0} == 1 ]]; then
		die "$verb needs Debian packages that are missing: run scripts/prereqs.sh ${*} (it installs them) or $install"
	fi
	say "installing the Debian packages $verb needs: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || die "apt-get update failed; fix the package sources, then run: $install"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		die "apt-get install failed; run it by hand to see why: $install"
	mapfile -t still < <(missing_packages)
	((${#still[@]} == 0)) || die "installed ${missing[*]}, but these still lack what $list says they provide: ${still[*]}"
	say "installed ${missing[*]}"
fi

if [[ -n ${want[e2e]:-}${want[demo]:-} ]]; then
	# A container without CAP_SYS_ADMIN is root but still cannot make the node's namespace.
	unshare --net true 2>/dev/null ||
		die "$verb needs to create network namespaces (unshare --net failed): run it on a VM or a privileged container"
	[[ -w /sys/fs/cgroup ]] || die "$verb needs /sys/fs/cgroup writable for the kubelet (it is read-only here): run it on a VM or a privileged container"
fi

# Room for the toolchain build (Go's build cache and bin/), unless it was built already.
if [[ ! -x $root/bin/kube-apiserver && ${want[envtest]:-}${want[e2e]:-}${want[demo]:-} != "" ]]; then
	cache=$(go env GOCACHE)
	mkdir -p "$cache"
	free_kb=$(df -Pk "$cache" | awk 'NR==2{print $4}')
	((free_kb > 8 * 1024 * 1024)) ||
		die "the first toolchain build needs about 8 GiB free under $cache; $((free_kb / 1024)) MiB are: free some, or set GOCACHE elsewhere"
fi

say "ready for $verb"
