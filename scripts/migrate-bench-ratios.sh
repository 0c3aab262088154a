#!/usr/bin/env bash
# Reads the output of `go test -tags envtest -bench BenchmarkReencode ./internal/migrate/` (stdin or files)
# and prints the mean objects/s, apiserver p99 and AdmissionReviews per object of every
# variant, and the ratios the migrator is held to, each with "ok" or "MISSED":
# a/b (this migrator through the main resource / the naive unthrottled loop, target >= 0.9)
# and a'/b (this migrator through the status subresource / the same loop, target >= 1.0);
# then, without a target, how a' compares with the storage-version-migrator (c), Cluster
# API's crdmigrator (d) and the in-tree StorageVersionMigration (e).
set -euo pipefail
awk '
function verdict(ok) { return ok ? "ok" : "MISSED" }
function ratio(label, x, y, target) {
	if (!mean[x] || !mean[y]) return
	r = mean[x] / mean[y]
	if (target == "") printf "  %-6s %6.2f\n", label, r
	else printf "  %-6s %6.2f (target >= %s) %s\n", label, r, target, verdict(r >= target + 0)
}
/^BenchmarkReencode\/variant=/ {
	v = $1; sub(/^BenchmarkReencode\/variant=/, "", v); sub(/-[0-9]+$/, "", v)
	for (i = 3; i < NF; i += 2) {
		if ($(i+1) == "objects/s") { rate[v] += $i; n[v]++ }
		if ($(i+1) == "apiserver-p99-ms") p99[v] += $i
		if ($(i+1) == "admission-reviews/object") adm[v] += $i
	}
	if (!(v in seen)) { seen[v] = 1; order[++k] = v }
}
END {
	for (j = 1; j <= k; j++) { v = order[j]; mean[v] = rate[v] / n[v]
		printf "  %-20s %9.1f objects/s   apiserver p99 %6.0f ms   %4.2f admission reviews/object   (mean of %d)\n", v, mean[v], p99[v] / n[v], adm[v] / n[v], n[v] }
	ratio("a/b", "a-migrator-main", "b-floor", "0.9")
	ratio("a'"'"'/b", "a1-migrator-status", "b-floor", "1.0")
	ratio("a'"'"'/c", "a1-migrator-status", "c-svm-put-qps5", "")
	ratio("a'"'"'/d", "a1-migrator-status", "d-capi-ssa-qps20", "")
	ratio("a'"'"'/e", "a1-migrator-status", "e-in-tree", "")
}' "$@"
