#!/usr/bin/env bash
# Reads `go test -bench` output of the webhook and manager benchmarks (stdin or files) and
# prints means and the ratios each is held to, per -cpu setting (a benchmark name without a
# -N suffix ran at -cpu 1), each with its target and "ok" or "MISSED":
#
#   handler= sub-benchmarks (BenchmarkConvertReview): mean ns/op, alloc-B/payload-B and
#     peak-heap/body of every handler; a/b = handler=widget / controller-runtime's stock
#     handler (target <= 0.3 at -cpu 1), a/c = widget / the encoding/json floor (<= 2), and
#     the widget handler's bytes allocated per byte of body (<= 3) and peak heap per byte of
#     body (<= 2.5).
#   version= sub-benchmarks (BenchmarkListThroughConversion): mean ns/op of a LIST through
#     each version; v1alpha1/v1 (target <= 1.1) per LIST shape (not for the create and
#     rebuild sub-benchmarks, which measure what the webhook receives, without a target).
#   BenchmarkManagerAtScale: the manager's RSS with the Widgets reconciled and the manager
#     settled (<= 150 MiB), its live heap then, and
#     the webhook's single-object p99 at 200 requests/s (<= 5 ms).
set -euo pipefail
awk '
function verdict(ok) { return ok ? "ok" : "MISSED" }
/^Benchmark/ {
	name = $1; cpu = 1
	if (match(name, /-[0-9]+$/)) { cpu = substr(name, RSTART + 1); name = substr(name, 1, RSTART - 1) }
	delete m
	for (i = 3; i < NF; i += 2) m[$(i+1)] = $i
	if (name ~ /\/handler=/) {
		split(name, parts, "/handler="); g = parts[1] " (-cpu " cpu ")"; h = parts[2]
		if (!(g in seen)) { seen[g] = 1; groups[++ng] = g }
		if (!((g, h) in hseen)) { hseen[g, h] = 1; hs[g, ++nh[g]] = h }
		n[g, h]++; ns[g, h] += m["ns/op"]; alloc[g, h] += m["alloc-B/payload-B"]; peak[g, h] += m["peak-heap/body"]
		cpus[g] = cpu
	} else if (name ~ /\/version=/ && name !~ /\/(create|rebuild)\//) {
		split(name, parts, "/version="); g = parts[1] (cpu == 1 ? "" : " (-cpu " cpu ")"); v = parts[2]
		if (!(g in lseen)) { lseen[g] = 1; lists[++nl] = g }
		ln[g, v]++; lns[g, v] += m["ns/op"]
	} else if (name ~ /^BenchmarkManagerAtScale/) {
		mgr++
		for (i = 3; i < NF; i += 2) { u = $(i+1); msum[u] += $i; if (!(u in useen)) { useen[u] = 1; units[++nu] = u } }
	}
}
END {
	for (k = 1; k <= ng; k++) {
		g = groups[k]; printf "%s\n", g
		for (j = 1; j <= nh[g]; j++) { h = hs[g, j]
			printf "  %-22s %14.0f ns/op  %6.2f alloc-B/payload-B  %6.2f peak-heap/body  (mean of %d)\n", h, ns[g, h] / n[g, h], alloc[g, h] / n[g, h], peak[g, h] / n[g, h], n[g, h] }
		if (!n[g, "widget"]) continue
		a = ns[g, "widget"] / n[g, "widget"]
		if (n[g, "controller-runtime"]) { r = a / (ns[g, "controller-runtime"] / n[g, "controller-runtime"])
			if (cpus[g] == 1) printf "  a/b widget/controller-runtime   %.2f (target <= 0.3 at -cpu 1) %s\n", r, verdict(r <= 0.3)
			else printf "  a/b widget/controller-runtime   %.2f (the target is at -cpu 1; here the handler also splits the review over %d cores)\n", r, cpus[g] }
		if (n[g, "encoding-json-floor"]) { r = a / (ns[g, "encoding-json-floor"] / n[g, "encoding-json-floor"])
			printf "  a/c widget/encoding-json-floor  %.2f (target <= 2) %s\n", r, verdict(r <= 2) }
		r = alloc[g, "widget"] / n[g, "widget"]; printf "  widget allocated / payload      %.2f (target <= 3) %s\n", r, verdict(r <= 3)
		r = peak[g, "widget"] / n[g, "widget"]; printf "  widget peak heap / body         %.2f (target <= 2.5) %s\n", r, verdict(r <= 2.5)
	}
	for (k = 1; k <= nl; k++) {
		g = lists[k]; printf "%s\n", g
		if (ln[g, "v1alpha1"]) printf "  v1alpha1 (converted)  %14.0f ns/op (mean of %d)\n", lns[g, "v1alpha1"] / ln[g, "v1alpha1"], ln[g, "v1alpha1"]
		if (ln[g, "v1"]) printf "  v1 (no conversion)    %14.0f ns/op (mean of %d)\n", lns[g, "v1"] / ln[g, "v1"], ln[g, "v1"]
		if (ln[g, "v1alpha1"] && ln[g, "v1"]) { r = (lns[g, "v1alpha1"] / ln[g, "v1alpha1"]) / (lns[g, "v1"] / ln[g, "v1"])
			printf "  v1alpha1/v1 %.2f (target <= 1.1) %s\n", r, verdict(r <= 1.1) }
	}
	if (mgr) {
		printf "BenchmarkManagerAtScale (mean of %d)\n", mgr
		for (k = 1; k <= nu; k++) { u = units[k]; if (u != "ns/op") printf "  %-22s %10.2f\n", u, msum[u] / mgr }
		if ("rss-settled-MiB" in msum) { r = msum["rss-settled-MiB"] / mgr; printf "  manager RSS, Widgets reconciled  %.0f MiB (target <= 150) %s\n", r, verdict(r <= 150) }
		if ("heap-live-MiB" in msum) { printf "  manager live heap then           %.0f MiB\n", msum["heap-live-MiB"] / mgr }
		if ("p99-ms" in msum) { r = msum["p99-ms"] / mgr; printf "  webhook p99 at 200 requests/s    %.2f ms (target <= 5) %s\n", r, verdict(r <= 5) }
	}
}' "$@"
