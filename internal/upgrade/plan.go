package upgrade

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/widgetry/widget-operator/internal/crd"
)

// Refusal is a step the engine will not take: nothing was changed; Message says why and
// Next names the next safe step, with its runbook.
type Refusal struct {
	Message string
	Next    string
}

func (r *Refusal) Error() string {
	if r.Next == "" {
		return r.Message
	}
	return r.Message + "; next safe step: " + r.Next
}

// IsRefusal reports whether err is, or wraps, a Refusal.
func IsRefusal(err error) bool {
	var r *Refusal
	return errors.As(err, &r)
}

// Check names a precondition of a step.
type Check string

// The preflight checks.
const (
	CheckEstablished      Check = "crd-established"
	CheckWebhookProbe     Check = "conversion-webhook-probe"
	CheckBuildConversion  Check = "conversion-of-this-build"
	CheckDryRunCreate     Check = "dry-run-create-through-new"
	CheckReadAllVersions  Check = "read-through-every-served-version"
	CheckOnlyNewStored    Check = "stored-versions-only-new"
	CheckOwnerReferences  Check = "no-owner-reference-to-old"
	CheckNothingNewStored Check = "nothing-stored-as-new"
	CheckOldManagedFields Check = "no-managed-fields-of-old"
	CheckRecordTraffic    Check = "record-old-version-traffic"
	CheckOldTraffic       Check = "no-old-version-traffic"
	CheckBackupRecorded   Check = "backup-recorded"
	CheckRestoreDrilled   Check = "backup-drilled"
	CheckOldManifests     Check = "no-release-manifest-of-old"
)

// Step moves one stage forward or back, stays at a stage (a new build), or repairs an
// inconsistent CRD to a stage.
type Step struct {
	From     crd.Stage `json:"from"`
	To       crd.Stage `json:"to"`
	Rollback bool      `json:"rollback"`
	// Repair marks a step from an inconsistent CRD: the flags of To, on the storedVersions
	// the CRD has, make a consistent stage.
	Repair bool `json:"repair,omitempty"`
	// Change is the CRD change the step makes.
	Change string `json:"change"`
	// Then is what must run after the CRD change (the chart's post-upgrade hook does it).
	Then   string  `json:"then,omitempty"`
	Checks []Check `json:"checks"`
}

func stageIndex(s crd.Stage) int { return slices.Index(crd.Stages, s) }

// Plan returns the steps from the observed stage to target, one stage each. A jump of more
// than one stage is refused, naming the next safe step: the apiserver's stage guard refuses
// it as well, and one command that moves several stages would check each step against a
// CRD that has moved on since. At the target already, the plan is one step that changes
// nothing and checks this build's conversion (a helm upgrade or rollback of the image). From
// an inconsistent CRD the plan is one repair step to target when target's flags make the CRD
// consistent, else a refusal naming the stages that would.
func Plan(o *Observation, cfg Config, target crd.Stage) ([]Step, error) {
	if _, err := crd.ParseStage(string(target)); err != nil {
		return nil, &Refusal{Message: err.Error(), Next: "stay at " + o.StageLabel() + " and name one of the stages " + crd.StageNames() + " (" + cfg.RunbookDir + "/README.md)"}
	}
	if !o.Exists {
		return []Step{{To: target, Change: fmt.Sprintf("install the CRD at stage %s: nothing is stored yet, any stage may be installed", target), Checks: []Check{}}}, nil
	}
	if o.Inconsistent != "" {
		return planRepair(o, cfg, target)
	}
	from, to := stageIndex(o.Stage), stageIndex(target)
	if from == to {
		return []Step{{From: o.Stage, To: target, Change: "none: the same stage (a new build is checked before its pods take traffic)",
			Checks: []Check{CheckEstablished, CheckBuildConversion}}}, nil
	}
	dir := 1
	if to < from {
		dir = -1
	}
	var steps []Step
	changes := 0
	for i := from; i != to; i += dir {
		s := step(cfg, crd.Stages[i], crd.Stages[i+dir])
		if !sameFlags(s.From, s.To) {
			changes++
		}
		steps = append(steps, s)
	}
	// flip-storage and migrate render the same flags, so moving across that pair and one
	// more stage is still a single change of the CRD (for example a helm rollback from
	// flip-storage to add-version when the migration had already run).
	if changes > 1 {
		next := crd.Stages[from+dir]
		return nil, &Refusal{Message: fmt.Sprintf("stage %s to %s skips %d stage(s); the API moves one stage at a time", o.Stage, target, abs(to-from)-1),
			Next: fmt.Sprintf("%s (%s)", next, cfg.Runbook(next))}
	}
	return steps, nil
}

// planRepair plans the way back from an inconsistent CRD: the flags of target, set on the
// live CRD with its storedVersions as they are, must derive a consistent stage (target, or
// its twin with the same flags). Nothing stored is touched; the checks that the conversion
// works run first wherever the repaired stage serves two versions.
func planRepair(o *Observation, cfg Config, target crd.Stage) ([]Step, error) {
	repairs := Repairs(o, cfg)
	for _, r := range repairs {
		if r.To != target {
			continue
		}
		checks := []Check{CheckBuildConversion}
		if o.live != nil && o.live.Spec.Conversion != nil && o.live.Spec.Conversion.Strategy == "Webhook" && target != crd.StageInitial {
			checks = append(checks, CheckWebhookProbe)
		}
		return []Step{{To: target, Repair: true, Checks: checks,
			Change: fmt.Sprintf("repair: set the version flags of stage %s (the CRD then reads as %s)", target, r.Becomes)}}, nil
	}
	next := "repair the CRD by hand (" + cfg.RunbookDir + "/README.md#inconsistent)"
	if len(repairs) > 0 {
		var names []string
		for _, r := range repairs {
			names = append(names, string(r.To))
		}
		next = fmt.Sprintf("move to one of the stages %s repair it to: %s (%s/README.md#inconsistent)", o.CRD, strings.Join(names, ", "), cfg.RunbookDir)
	}
	return nil, &Refusal{Message: fmt.Sprintf("CRD %s is in an inconsistent state: %s; stage %s does not repair it", o.CRD, o.Inconsistent, target), Next: next}
}

// Repair is a stage whose flags turn an inconsistent CRD into a consistent one.
type Repair struct {
	To      crd.Stage `json:"to"`
	Becomes string    `json:"becomes"`
}

// Repairs lists the stages whose flags make an inconsistent CRD consistent, without any
// change to what is stored.
func Repairs(o *Observation, cfg Config) []Repair {
	if o.live == nil || o.Inconsistent == "" {
		return nil
	}
	var out []Repair
	restored := ""
	if o.Conversion != string(apiextensionsv1.WebhookConverter) {
		restored = " once the conversion webhook is back (the chart renders it)"
	}
	for _, s := range crd.Stages {
		c := o.live.DeepCopy()
		if restored != "" {
			// Judged as the chart would render it: with its conversion webhook.
			c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter}
		}
		if err := crd.SetStageFlags(c, cfg.pair(), s); err != nil || CheckVersionsKept(c) != nil {
			continue
		}
		if r := ObserveCRD(c, cfg); r.Inconsistent == "" && (r.Stage == s || sameFlags(r.Stage, s)) {
			out = append(out, Repair{To: s, Becomes: r.StageLabel() + restored})
		}
	}
	return out
}

// sameFlags reports whether two adjacent stages render the same CRD flags.
func sameFlags(a, b crd.Stage) bool {
	pair := func(s crd.Stage) bool { return s == crd.StageFlipStorage || s == crd.StageMigrate }
	return pair(a) && pair(b)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// step describes one transition and its checks.
func step(cfg Config, from, to crd.Stage) Step {
	s := Step{From: from, To: to, Rollback: stageIndex(to) < stageIndex(from)}
	base := []Check{CheckEstablished}
	switch {
	case from == crd.StageInitial && to == crd.StageAddVersion:
		s.Change = fmt.Sprintf("add %s (served, not stored); mark %s deprecated", cfg.New, cfg.Old)
		s.Checks = append(base, CheckWebhookProbe)
	case from == crd.StageAddVersion && to == crd.StageFlipStorage:
		s.Change = fmt.Sprintf("make %s the storage version (objects written from now on are stored as %s)", cfg.New, cfg.New)
		s.Checks = append(base, CheckWebhookProbe, CheckDryRunCreate, CheckReadAllVersions, CheckRecordTraffic, CheckBackupRecorded)
	case from == crd.StageFlipStorage && to == crd.StageMigrate:
		s.Change = "none (the flags stay)"
		s.Then = fmt.Sprintf("rewrite every stored object as %s, then trim status.storedVersions to [%s] (widgetctl migrate --crd %s)", cfg.New, cfg.New, cfg.CRD)
		s.Checks = append(base, CheckWebhookProbe)
	case from == crd.StageMigrate && to == crd.StageUnserve:
		s.Change = fmt.Sprintf("stop serving %s", cfg.Old)
		s.Checks = append(base, CheckOnlyNewStored, CheckOwnerReferences, CheckOldManifests, CheckRestoreDrilled, CheckOldTraffic)
	case from == crd.StageUnserve && to == crd.StageRemove:
		s.Change = fmt.Sprintf("remove %s from spec.versions (a rollback defines it again, not served)", cfg.Old)
		s.Checks = append(base, CheckOnlyNewStored, CheckOwnerReferences, CheckOldManagedFields, CheckOldManifests, CheckRestoreDrilled, CheckOldTraffic)
	case from == crd.StageRemove && to == crd.StageUnserve:
		s.Change = fmt.Sprintf("define %s again, not served", cfg.Old)
		s.Checks = base
	case from == crd.StageUnserve && to == crd.StageMigrate:
		s.Change = fmt.Sprintf("serve %s again (deprecated)", cfg.Old)
		s.Checks = append(base, CheckWebhookProbe)
	case from == crd.StageMigrate && to == crd.StageFlipStorage:
		s.Change = fmt.Sprintf("none (the flags stay; storedVersions stays [%s])", cfg.New)
		s.Checks = append(base, CheckWebhookProbe)
	case from == crd.StageFlipStorage && to == crd.StageAddVersion:
		s.Change = fmt.Sprintf("make %s the storage version again (objects already stored as %s stay so until rewritten)", cfg.Old, cfg.New)
		s.Checks = append(base, CheckWebhookProbe)
	case from == crd.StageAddVersion && to == crd.StageInitial:
		s.Change = fmt.Sprintf("remove %s from the CRD; %s is no longer deprecated", cfg.New, cfg.Old)
		s.Checks = append(base, CheckNothingNewStored)
	}
	return s
}
