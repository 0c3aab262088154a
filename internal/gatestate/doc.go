// Package gatestate is the client side of the gate-state guard: the objects the upgrade gates
// trust (the migration's progress, the traffic samples, the backup record, the pause marker,
// the caBundle Secret) may be written only by the chart's own ServiceAccounts, or by someone
// allowed to override the guard who records why (the annotation Annotation). The apiserver
// holds the rule (the chart's ValidatingAdmissionPolicy <crd>-gate-state-guard); this package
// makes widgetctl record its reason on every such object it writes, so that a cluster admin
// running a runbook by hand passes the guard and the audit log says why.
package gatestate
