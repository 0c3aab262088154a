// Package docs holds the tests that keep the README's commands true: every shell command in
// README.md is run (or its flags and values are checked by the tool itself) or is exercised
// by the demo or CI.
package docs
