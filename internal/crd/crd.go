package crd

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// WidgetName is the Widget CRD's name.
const WidgetName = "widgets.widgetry.io"

//go:embed bases/widgetry.io_widgets.yaml
var widgetYAML []byte

var parsed = sync.OnceValues(func() (*apiextensionsv1.CustomResourceDefinition, error) {
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(widgetYAML, c); err != nil {
		return nil, fmt.Errorf("parse the generated Widget CRD: %w", err)
	}
	return c, nil
})

// Widget returns a fresh copy of the generated Widget CRD: both versions served,
// v1alpha1 the storage version, no conversion strategy.
func Widget() *apiextensionsv1.CustomResourceDefinition {
	c, err := parsed()
	if err != nil {
		// The file is generated and checked by tests; failing here is a build defect.
		panic(err)
	}
	return c.DeepCopy()
}

// WithWebhookConversion sets conversion strategy Webhook (ConversionReview v1) with the given
// client configuration, path /convert for a Service.
func WithWebhookConversion(c *apiextensionsv1.CustomResourceDefinition, cfg apiextensionsv1.WebhookClientConfig) *apiextensionsv1.CustomResourceDefinition {
	c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{
			ClientConfig:             &cfg,
			ConversionReviewVersions: []string{"v1"},
		},
	}
	return c
}

// SetStorageVersion marks version as the only storage version.
func SetStorageVersion(c *apiextensionsv1.CustomResourceDefinition, version string) error {
	found := false
	for i := range c.Spec.Versions {
		v := &c.Spec.Versions[i]
		v.Storage = v.Name == version
		found = found || v.Storage
	}
	if !found {
		return fmt.Errorf("CRD %s has no version %q", c.Name, version)
	}
	return nil
}

// Version returns the named version of the CRD, or nil.
func Version(c *apiextensionsv1.CustomResourceDefinition, name string) *apiextensionsv1.CustomResourceDefinitionVersion {
	for i := range c.Spec.Versions {
		if c.Spec.Versions[i].Name == name {
			return &c.Spec.Versions[i]
		}
	}
	return nil
}

// Stage is one step of the staged API upgrade; the package documentation has the table of
// stages.
type Stage string

// The six stages, in order.
const (
	StageInitial     Stage = "initial"
	StageAddVersion  Stage = "add-version"
	StageFlipStorage Stage = "flip-storage"
	StageMigrate     Stage = "migrate"
	StageUnserve     Stage = "unserve"
	StageRemove      Stage = "remove"
)

// Stages lists the stages in upgrade order.
var Stages = []Stage{StageInitial, StageAddVersion, StageFlipStorage, StageMigrate, StageUnserve, StageRemove}

// StageNames is the list of stages as messages name them.
func StageNames() string {
	names := make([]string, len(Stages))
	for i, s := range Stages {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// DeprecationWarning is what clients of v1alpha1 see from add-version on.
const DeprecationWarning = "widgetry.io/v1alpha1 Widget is deprecated; use widgetry.io/v1 (runbooks/upgrade/add-version.md)"

// ParseStage returns the named stage or an error listing the valid ones.
func ParseStage(name string) (Stage, error) {
	for _, s := range Stages {
		if string(s) == name {
			return s, nil
		}
	}
	return "", fmt.Errorf("unknown stage %q; the stages are %s", name, StageNames())
}

// VersionPair is the pair of versions a staged upgrade moves between, for any CRD.
type VersionPair struct {
	// Old is the version being retired, New the one replacing it.
	Old, New string
	// Template returns the definition of a version of the pair when the CRD lacks it: New
	// before add-version, Old on the way back from remove (nil: it cannot be added).
	Template func(name string) *apiextensionsv1.CustomResourceDefinitionVersion
	// DeprecationWarning is set on Old from add-version on.
	DeprecationWarning string
}

// ErrNoTemplate is returned when a version must be added but the pair has no template for it.
var ErrNoTemplate = errors.New("the CRD lacks the version and no schema for it is known")

// WidgetPair is the Widget API's pair, with the generated schemas.
func WidgetPair() VersionPair {
	return VersionPair{Old: "v1alpha1", New: "v1", DeprecationWarning: DeprecationWarning,
		Template: func(name string) *apiextensionsv1.CustomResourceDefinitionVersion { return Version(Widget(), name) }}
}

// SetStageFlags sets c's versions as the stage table of the package documentation says —
// which versions exist, which are served, which is stored, Old's deprecation — flipping the
// flags of the versions in place, adding a version the stage has and c lacks from the pair's
// template (New on the way to add-version, Old on the way back from remove) and dropping the
// one it does not have. Everything else on c (schemas, conversion, metadata) is kept. This is
// the one place the table's flags are written.
func SetStageFlags(c *apiextensionsv1.CustomResourceDefinition, pair VersionPair, stage Stage) error {
	if _, err := ParseStage(string(stage)); err != nil {
		return err
	}
	// index returns the position of the named version, appended from the template if missing.
	index := func(name string) (int, error) {
		if i := slices.IndexFunc(c.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == name }); i >= 0 {
			return i, nil
		}
		var v *apiextensionsv1.CustomResourceDefinitionVersion
		if pair.Template != nil {
			v = pair.Template(name)
		}
		if v == nil {
			return -1, fmt.Errorf("CRD %s, version %s: %w", c.Name, name, ErrNoTemplate)
		}
		c.Spec.Versions = append(c.Spec.Versions, *v.DeepCopy())
		return len(c.Spec.Versions) - 1, nil
	}
	// only keeps the named version alone, served and stored.
	only := func(name string) error {
		i, err := index(name)
		if err != nil {
			return err
		}
		v := c.Spec.Versions[i]
		v.Served, v.Storage = true, true
		c.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{v}
		return nil
	}
	switch stage {
	case StageInitial:
		if err := only(pair.Old); err != nil {
			return err
		}
		c.Spec.Versions[0].Deprecated, c.Spec.Versions[0].DeprecationWarning = false, nil
		return nil
	case StageRemove:
		return only(pair.New)
	}
	idxOld, err := index(pair.Old)
	if err != nil {
		return err
	}
	idxNew, err := index(pair.New)
	if err != nil {
		return err
	}
	old, nw := &c.Spec.Versions[idxOld], &c.Spec.Versions[idxNew]
	old.Deprecated, old.DeprecationWarning = true, nil
	if pair.DeprecationWarning != "" {
		old.DeprecationWarning = ptrTo(pair.DeprecationWarning)
	}
	switch stage {
	case StageAddVersion:
		old.Served, old.Storage, nw.Served, nw.Storage = true, true, true, false
	case StageFlipStorage, StageMigrate:
		old.Served, old.Storage, nw.Served, nw.Storage = true, false, true, true
	case StageUnserve:
		old.Served, old.Storage, nw.Served, nw.Storage = false, false, true, true
	}
	return nil
}

// ApplyStageFlags is SetStageFlags for the Widget CRD.
func ApplyStageFlags(c *apiextensionsv1.CustomResourceDefinition, stage Stage) error {
	return SetStageFlags(c, WidgetPair(), stage)
}

func ptrTo[T any](v T) *T { return &v }
