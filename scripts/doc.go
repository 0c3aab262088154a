// Package scripts holds the tests of the repository's shell scripts that make verbs run
// before anything else: scripts/prereqs.sh must stop a run within seconds, with the exact
// command to run, rather than after a 25-minute build.
package scripts
