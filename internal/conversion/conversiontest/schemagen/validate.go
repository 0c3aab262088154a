package schemagen

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	kjson "k8s.io/apimachinery/pkg/util/json" // whole numbers as int64, as the apiserver decodes

	"github.com/widgetry/widget-operator/internal/crd/crdcel"
)

// Version is one version of a CRD as the apiserver validates its objects: the OpenAPI
// schema's validator and the CEL rules, both the apiserver's own code.
type Version struct {
	Group, Kind, Name string
	schema            *apiextensionsv1.JSONSchemaProps
	structural        *structuralschema.Structural
	openAPI           validation.SchemaValidator
	cel               *crdcel.Validator
}

// VersionOf returns version of c.
func VersionOf(c *apiextensionsv1.CustomResourceDefinition, version string) (*Version, error) {
	for _, v := range c.Spec.Versions {
		if v.Name != version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		props := withScaleBounds(v.Schema.OpenAPIV3Schema, v.Subresources)
		internal := &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(props, internal, nil); err != nil {
			return nil, err
		}
		openAPI, _, err := validation.NewSchemaValidator(internal)
		if err != nil {
			return nil, err
		}
		structural, err := structuralschema.NewStructural(internal)
		if err != nil {
			return nil, err
		}
		cel, err := crdcel.New(c, version)
		if err != nil {
			return nil, err
		}
		return &Version{Group: c.Spec.Group, Kind: c.Spec.Names.Kind, Name: version, schema: props, structural: structural, openAPI: openAPI, cel: cel}, nil
	}
	return nil, fmt.Errorf("schemagen: %s has no version %s with a schema", c.Name, version)
}

// Validate says why the apiserver would refuse obj (JSON) on create, or nil.
func (v *Version) Validate(obj []byte) error {
	var o any
	if err := kjson.Unmarshal(obj, &o); err != nil {
		return err
	}
	if errs := validation.ValidateCustomResource(nil, o, v.openAPI); len(errs) > 0 {
		return errs.ToAggregate()
	}
	errs, err := v.cel.Validate(obj, nil)
	if err != nil {
		return err
	}
	return errs.ToAggregate()
}

// withScaleBounds is props with the bounds the apiserver puts on the scale subresource's
// replica counts besides the schema: they must be non-negative (it refuses a negative
// .status.availableReplicas on a status write whatever the schema says).
func withScaleBounds(props *apiextensionsv1.JSONSchemaProps, sub *apiextensionsv1.CustomResourceSubresources) *apiextensionsv1.JSONSchemaProps {
	if sub == nil || sub.Scale == nil {
		return props
	}
	props = props.DeepCopy()
	for _, path := range []string{sub.Scale.SpecReplicasPath, sub.Scale.StatusReplicasPath} {
		nonNegative(props, strings.Split(strings.TrimPrefix(path, "."), "."))
	}
	return props
}

// nonNegative sets a minimum of 0 on the property at path below node.
func nonNegative(node *apiextensionsv1.JSONSchemaProps, path []string) {
	if len(path) == 0 {
		if node.Minimum == nil || *node.Minimum < 0 {
			node.Minimum = new(float64)
		}
		return
	}
	child, ok := node.Properties[path[0]]
	if !ok {
		return
	}
	nonNegative(&child, path[1:])
	node.Properties[path[0]] = child
}

// Default applies the schema's defaults to obj (decoded JSON) in place, as the apiserver does
// to every object it reads and writes.
func (v *Version) Default(obj any) { structuraldefaulting.Default(obj, v.structural) }

// Object draws an object of v (JSON) that v admits: spec and status from the schema, the
// metadata a client may write (labels, annotations of any text), named name in namespace.
// It draws again while the apiserver's validators refuse what it drew, and counts those
// draws in Refused.
func (g *Generator) Object(v *Version, namespace, name string) ([]byte, error) {
	for tries := 0; tries < 1000; tries++ {
		obj := map[string]any{
			"apiVersion": v.Group + "/" + v.Name,
			"kind":       v.Kind,
			"metadata":   g.metadata(namespace, name),
		}
		g.atBound = g.r.Intn(4) == 0
		for _, field := range []string{"spec", "status"} {
			s, ok := v.schema.Properties[field]
			if !ok {
				continue
			}
			isRequired := false
			for _, r := range v.schema.Required {
				isRequired = isRequired || r == field
			}
			if !isRequired && g.r.Intn(3) == 0 {
				continue
			}
			val, err := g.value(&s, "."+field)
			if err != nil {
				return nil, err
			}
			obj[field] = val
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if err := v.Validate(b); err != nil {
			g.Refused++
			g.LastRefusal = err
			g.drop()
			continue
		}
		g.keep()
		g.Drawn++
		return b, nil
	}
	return nil, fmt.Errorf("schemagen: 1000 draws for %s/%s refused, the last: %w", v.Group, v.Name, g.LastRefusal)
}

func (g *Generator) metadata(namespace, name string) map[string]any {
	m := map[string]any{"name": name}
	if namespace != "" {
		m["namespace"] = namespace
	}
	// Never an empty map: the apiserver reads metadata into an ObjectMeta and writes it back,
	// which drops empty labels and annotations before any conversion sees them.
	if g.r.Intn(2) == 0 {
		labels := map[string]any{}
		for i := range 1 + g.r.Intn(3) {
			labels[fmt.Sprintf("widgetry.io/l%d", i)] = fmt.Sprintf("v%d", g.r.Intn(100))
		}
		m["labels"] = labels
	}
	if g.r.Intn(2) == 0 {
		annotations := map[string]any{}
		for i := range 1 + g.r.Intn(3) {
			value := make([]rune, g.r.Intn(40))
			for j := range value {
				value[j] = anyRune(g.r)
			}
			annotations[fmt.Sprintf("example.com/a%d", i)] = string(value)
		}
		m["annotations"] = annotations
	}
	return m
}
