#!/usr/bin/env bash
# Reads `go test -bench` output (stdin or files) and prints, for every benchmark with
# handler= sub-benchmarks, the mean ns/op of each and the ratios of handler=widget to the
# others: a/b (controller-runtime's stock handler) and a/c (the encoding/json floor).
set -euo pipefail
awk '
/^Benchmark.*handler=/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	split(name, parts, "/handler=")
	for (i = 2; i <= NF; i++) if ($(i+1) == "ns/op") { sum[parts[1], parts[2]] += $i; n[parts[1], parts[2]]++ }
	groups[parts[1]] = 1; handlers[parts[2]] = 1
}
END {
	for (g in groups) {
		if (!n[g, "widget"]) continue
		a = sum[g, "widget"] / n[g, "widget"]
		printf "%s\n", g
		for (h in handlers) if (n[g, h]) printf "  %-28s %14.0f ns/op (mean of %d)\n", h, sum[g, h] / n[g, h], n[g, h]
		if (n[g, "controller-runtime"]) printf "  a/b widget/controller-runtime   %.2f (target <= 0.5)\n", a / (sum[g, "controller-runtime"] / n[g, "controller-runtime"])
		if (n[g, "encoding-json-floor"]) printf "  a/c widget/encoding-json-floor  %.2f (target <= 2)\n", a / (sum[g, "encoding-json-floor"] / n[g, "encoding-json-floor"])
	}
}' "$@"
