#!/usr/bin/env bash
# make test: the three test tiers, one after the other and each alone on the machine's
# cores, then a summary. Every prerequisite of every tier is checked (and the Debian
# packages installed) before anything is built, so a missing one stops the run at once.
#
# A tier is never skipped silently. SKIP_TIERS="e2e" (or "envtest e2e") leaves tiers out on
# purpose; the summary then says, in capitals, what was not proven.
#
# Usage: scripts/test.sh   (make test)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2

tiers=(unit envtest e2e)
skip=" ${SKIP_TIERS:-} "
for s in ${SKIP_TIERS:-}; do
	case " ${tiers[*]} " in *" $s "*) ;; *)
		echo "SKIP_TIERS names '$s', which is not a tier (${tiers[*]})" >&2
		exit 2
		;;
	esac
done
run=()
for t in "${tiers[@]}"; do [[ $skip == *" $t "* ]] || run+=("$t"); done
((${#run[@]} > 0)) || {
	echo "SKIP_TIERS leaves no tier to run" >&2
	exit 2
}

# Everything the tiers that run will need, before the first build.
MAKE_VERB="make test" scripts/prereqs.sh "${run[@]}" || exit 1

declare -A result took
failed=0
for t in "${tiers[@]}"; do
	if [[ $skip == *" $t "* ]]; then
		result[$t]="NOT RUN (SKIP_TIERS)"
		took[$t]=-
		continue
	fi
	printf '\n\033[1m== make test-%s\033[0m\n' "$t"
	start=$SECONDS
	if make --no-print-directory "test-$t"; then
		result[$t]=passed
	else
		result[$t]=FAILED
		failed=1
	fi
	took[$t]="$((SECONDS - start))s"
done

printf '\n\033[1m== make test: summary\033[0m\n'
for t in "${tiers[@]}"; do
	printf '   %-8s %-22s %s\n' "$t" "${result[$t]}" "${took[$t]}"
done
if [[ -n ${SKIP_TIERS:-} ]]; then
	printf '\n   !!! NOT EVERY TIER RAN: SKIP_TIERS="%s" left out what those tests prove. !!!\n' "$SKIP_TIERS"
	printf '   !!! This run is not the proof CI asks for; run make test without SKIP_TIERS. !!!\n'
fi
# The run's wall times, for the README's generated block (make reports publishes them): only
# a run where every tier ran and passed is a figure worth publishing.
if ((!failed)) && [[ -z ${SKIP_TIERS:-} ]]; then
	mkdir -p "$root/bin/reports"
	printf '{"date": "%s", "machine": "%s cores, %s", "tiers": [{"name": "unit", "seconds": %d}, {"name": "envtest", "seconds": %d}, {"name": "e2e", "seconds": %d}]}\n' \
		"$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$(uname -sm)" "${took[unit]%s}" "${took[envtest]%s}" "${took[e2e]%s}" >"$root/bin/reports/make-test.json"
fi
if ((failed)); then
	echo "make test: FAILED" >&2
	exit 1
fi
echo "make test: every tier that ran passed"
