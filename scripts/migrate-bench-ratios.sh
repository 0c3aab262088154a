#!/usr/bin/env bash
# Reads the output of `go test -tags envtest -bench BenchmarkReencode ./internal/migrate/` (stdin or files)
# and prints the mean objects/s and apiserver p99 of every variant, and the ratios the
# migrator is held to: a/b (this migrator / unthrottled floor, target >= 0.8) and a/d (this
# migrator / sequential patches at QPS 100, target >= 2.5), and b/d, which bounds a/d.
set -euo pipefail
awk '
/^BenchmarkReencode\/variant=/ {
	v = $1; sub(/^BenchmarkReencode\/variant=/, "", v); sub(/-[0-9]+$/, "", v)
	for (i = 2; i <= NF; i++) {
		if ($(i+1) == "objects/s") { rate[v] += $i; n[v]++ }
		if ($(i+1) == "apiserver-p99-ms") { p99[v] += $i }
	}
	if (!(v in seen)) { seen[v] = 1; order[++k] = v }
}
END {
	for (j = 1; j <= k; j++) { v = order[j]; mean[v] = rate[v] / n[v]
		printf "  %-16s %9.1f objects/s   apiserver p99 %6.0f ms   (mean of %d)\n", v, mean[v], p99[v] / n[v], n[v] }
	if (mean["a-migrator"] && mean["b-floor"]) printf "  a/b %.2f (target >= 0.8)\n", mean["a-migrator"] / mean["b-floor"]
	if (mean["a-migrator"] && mean["d-patch-qps100"]) printf "  a/d %.2f (target >= 2.5)\n", mean["a-migrator"] / mean["d-patch-qps100"]
	# No migrator outruns the unthrottled floor, so b/d bounds a/d on the machine measured.
	if (mean["b-floor"] && mean["d-patch-qps100"]) printf "  b/d %.2f (the most a/d can be on this machine)\n", mean["b-floor"] / mean["d-patch-qps100"]
}' "$@"
