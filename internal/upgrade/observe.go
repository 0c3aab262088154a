package upgrade

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/widgetry/widget-operator/internal/crd"
)

// VersionState is what the CRD says of one version.
type VersionState struct {
	Name               string  `json:"name"`
	Present            bool    `json:"present"`
	Served             bool    `json:"served"`
	Storage            bool    `json:"storage"`
	Deprecated         bool    `json:"deprecated"`
	DeprecationWarning *string `json:"deprecationWarning,omitempty"`
}

// Observation is the live state of a CRD and the stage it is at.
type Observation struct {
	CRD string `json:"crd"`
	// Exists is false when the CRD is not installed: nothing is stored, any stage may be
	// installed.
	Exists         bool           `json:"exists"`
	Old            VersionState   `json:"old"`
	New            VersionState   `json:"new"`
	StoredVersions []string       `json:"storedVersions"`
	Conversion     string         `json:"conversion"`
	Webhook        string         `json:"webhook,omitempty"`
	Conditions     map[string]any `json:"conditions,omitempty"`
	// Stage is the derived stage; empty when the state is inconsistent.
	Stage crd.Stage `json:"stage,omitempty"`
	// RolledBack marks add-version with New data stored: a reverse migration is needed before
	// initial.
	RolledBack bool `json:"rolledBack,omitempty"`
	// MigrationDone marks migrate (as opposed to flip-storage): storedVersions is [New].
	Inconsistent string `json:"inconsistent,omitempty"`
	// ResourceVersion of the CRD observed, for optimistic locking.
	ResourceVersion string `json:"-"`

	live *apiextensionsv1.CustomResourceDefinition
}

// StageLabel is the stage as people read it, including the named rollback state.
func (o *Observation) StageLabel() string {
	switch {
	case !o.Exists:
		return "none (CRD not installed)"
	case o.Inconsistent != "":
		return "inconsistent"
	case o.RolledBack:
		return string(o.Stage) + " (rolled back: " + o.New.Name + " objects stored)"
	}
	return string(o.Stage)
}

// Observe reads the CRD and derives its stage.
func Observe(ctx context.Context, c client.Reader, cfg Config) (*Observation, error) {
	live := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, client.ObjectKey{Name: cfg.CRD}, live); err != nil {
		if apierrors.IsNotFound(err) {
			return &Observation{CRD: cfg.CRD, Old: VersionState{Name: cfg.Old}, New: VersionState{Name: cfg.New}}, nil
		}
		return nil, fmt.Errorf("read CRD %s: %w", cfg.CRD, err)
	}
	return ObserveCRD(live, cfg), nil
}

// ObserveCRD derives the stage of a CRD object (the stage table of internal/crd's package
// documentation). Anything the table does not name is reported as inconsistent, never guessed.
func ObserveCRD(live *apiextensionsv1.CustomResourceDefinition, cfg Config) *Observation {
	o := &Observation{CRD: cfg.CRD, Exists: true, live: live, ResourceVersion: live.ResourceVersion,
		Old: versionState(live, cfg.Old), New: versionState(live, cfg.New),
		StoredVersions: slices.Clone(live.Status.StoredVersions), Conversion: "None"}
	if conv := live.Spec.Conversion; conv != nil {
		o.Conversion = string(conv.Strategy)
		if conv.Webhook != nil && conv.Webhook.ClientConfig != nil {
			o.Webhook = describeClientConfig(conv.Webhook.ClientConfig)
		}
	}
	for _, cond := range live.Status.Conditions {
		if o.Conditions == nil {
			o.Conditions = map[string]any{}
		}
		o.Conditions[string(cond.Type)] = string(cond.Status)
	}
	o.Stage, o.RolledBack, o.Inconsistent = deriveStage(o)
	return o
}

func versionState(live *apiextensionsv1.CustomResourceDefinition, name string) VersionState {
	for _, v := range live.Spec.Versions {
		if v.Name == name {
			return VersionState{Name: name, Present: true, Served: v.Served, Storage: v.Storage, Deprecated: v.Deprecated, DeprecationWarning: v.DeprecationWarning}
		}
	}
	return VersionState{Name: name}
}

func describeClientConfig(cc *apiextensionsv1.WebhookClientConfig) string {
	if cc.URL != nil {
		return *cc.URL
	}
	if s := cc.Service; s != nil {
		port := int32(443)
		if s.Port != nil {
			port = *s.Port
		}
		path := ""
		if s.Path != nil {
			path = *s.Path
		}
		return fmt.Sprintf("service %s/%s:%d%s", s.Namespace, s.Name, port, path)
	}
	return ""
}

// deriveStage maps flags × storedVersions to a stage.
func deriveStage(o *Observation) (crd.Stage, bool, string) {
	old, nw := o.Old, o.New
	stored := o.StoredVersions
	onlyOld := slices.Equal(stored, []string{old.Name})
	onlyNew := slices.Equal(stored, []string{nw.Name})
	storesNew := slices.Contains(stored, nw.Name)
	storesOld := slices.Contains(stored, old.Name)
	if extra := unknownStored(stored, old.Name, nw.Name); extra != "" {
		return "", false, fmt.Sprintf("storedVersions %v holds %s, which is neither %s nor %s", stored, extra, old.Name, nw.Name)
	}
	if cond, ok := o.Conditions["Established"]; ok && cond != "True" {
		return "", false, "the CRD is not Established; check its NamesAccepted condition and the apiserver's log"
	}
	if old.Present && nw.Present && o.Conversion != string(apiextensionsv1.WebhookConverter) {
		return "", false, fmt.Sprintf("both %s and %s are defined but conversion is %s: the apiserver would only rewrite apiVersion between them and lose fields; install the chart (it sets the conversion webhook) before any further step", old.Name, nw.Name, o.Conversion)
	}
	switch {
	case old.Present && old.Served && old.Storage && !nw.Present:
		if onlyOld || len(stored) == 0 {
			return crd.StageInitial, false, ""
		}
		return "", false, fmt.Sprintf("only %s is defined but storedVersions is %v", old.Name, stored)
	case old.Served && old.Storage && nw.Served && !nw.Storage:
		if onlyOld {
			return crd.StageAddVersion, false, ""
		}
		if storesNew {
			return crd.StageAddVersion, true, ""
		}
	case old.Served && !old.Storage && nw.Served && nw.Storage:
		if onlyNew {
			return crd.StageMigrate, false, ""
		}
		if storesOld {
			return crd.StageFlipStorage, false, ""
		}
	case old.Present && !old.Served && nw.Served && nw.Storage:
		if onlyNew {
			return crd.StageUnserve, false, ""
		}
		return "", false, fmt.Sprintf("%s is not served but storedVersions is %v: objects may still be stored as %s; serve it again (stage flip-storage or migrate: widgetctl upgrade plan --to migrate shows the repair) and migrate", old.Name, stored, old.Name)
	case !old.Present && nw.Served && nw.Storage:
		if onlyNew {
			return crd.StageRemove, false, ""
		}
	}
	return "", false, fmt.Sprintf("flags %s(served=%v storage=%v present=%v) %s(served=%v storage=%v present=%v) with storedVersions %v match no stage",
		old.Name, old.Served, old.Storage, old.Present, nw.Name, nw.Served, nw.Storage, nw.Present, stored)
}

func unknownStored(stored []string, known ...string) string {
	var extra []string
	for _, s := range stored {
		if !slices.Contains(known, s) {
			extra = append(extra, s)
		}
	}
	return strings.Join(extra, ",")
}
