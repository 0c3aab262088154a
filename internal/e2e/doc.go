// Package e2e holds the end-to-end tests of the whole product, those that belong to no one
// package (the tests of one package's behaviour on the real node sit next to it, under the
// same e2e build tag):
//
//   - the production proof (production_proof_test.go): the chart installed on a real node
//     with its Prometheus monitoring, and zero failed API requests across a rollout restart,
//     a helm upgrade of the pod template, a forced certificate renewal and the loss of the
//     leader, while a client drives Widgets through v1alpha1 so that every request crosses
//     the webhook Service;
//   - the README's commands (readme_test.go): every shell command of README.md is run, or its
//     flags and values are checked by the tool itself, or it is what the demo or CI runs.
//
// Its tests build only with -tags e2e; make test-e2e runs them alone, never beside other
// packages competing for the same cores.
package e2e
