// Package upgrade is the stage engine of staged API upgrades: it observes a CRD and derives
// its stage from its served/storage flags and status.storedVersions, plans the steps to a
// target stage one stage at a time, runs the preflight checks that must hold before each
// step, and applies the CRD change of a step with an optimistic lock. The table of stages,
// and why each exists, is in the documentation of package internal/crd.
//
// It knows nothing about Helm: the chart's hooks run `widgetctl upgrade preflight`, and
// on-call runs the same commands by hand. It works for any CRD and version pair (Config);
// WidgetConfig is the first user.
package upgrade
