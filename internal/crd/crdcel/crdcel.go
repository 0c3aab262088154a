// Package crdcel runs a CRD version's x-kubernetes-validations the way the apiserver does
// (k8s.io/apiextensions-apiserver's CEL validator, with its per-call and per-object cost
// limits), so that pure unit tests can hold a rule against the Go code it replaces.
package crdcel

import (
	"context"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apimachinery/pkg/util/json" // whole numbers as int64, as the apiserver decodes
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
)

// Validator evaluates the CEL rules of one version of a CRD.
type Validator struct {
	schema    *structuralschema.Structural
	validator *cel.Validator
}

// New compiles the rules of version in c.
func New(c *apiextensionsv1.CustomResourceDefinition, version string) (*Validator, error) {
	for _, v := range c.Spec.Versions {
		if v.Name != version || v.Schema == nil {
			continue
		}
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, err
		}
		s, err := structuralschema.NewStructural(internal)
		if err != nil {
			return nil, err
		}
		validator := cel.NewValidator(s, true, celconfig.PerCallLimit)
		if validator == nil {
			return nil, fmt.Errorf("crdcel: version %s of %s has no CEL rules", version, c.Name)
		}
		return &Validator{schema: s, validator: validator}, nil
	}
	return nil, fmt.Errorf("crdcel: %s has no version %s with a schema", c.Name, version)
}

// Validate runs the rules on obj (JSON of a whole object) as a create; with old non-empty, as
// an update from old, with the apiserver's ratcheting of unchanged values.
func (v *Validator) Validate(obj, old []byte) (field.ErrorList, error) {
	var o, oo any
	if err := json.Unmarshal(obj, &o); err != nil {
		return nil, err
	}
	if len(old) > 0 {
		if err := json.Unmarshal(old, &oo); err != nil {
			return nil, err
		}
	}
	var opts []cel.Option
	if oo != nil {
		// As the apiserver's update strategy does: errors of values equal to the old ones are
		// dropped (CRD validation ratcheting).
		opts = append(opts, cel.WithRatcheting(common.NewCorrelatedObject(o, oo, &model.Structural{Structural: v.schema})))
	}
	errs, _ := v.validator.Validate(context.Background(), nil, v.schema, o, oo, celconfig.RuntimeCELCostBudget, opts...)
	return errs, nil
}
