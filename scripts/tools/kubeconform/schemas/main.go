// Command schemas writes kubeconform's JSON schemas offline: one self-contained strict schema
// per kind and version, from Kubernetes' OpenAPI v2 document (k8s.io/kubernetes'
// api/openapi-spec/swagger.json) and from CustomResourceDefinition files (cert-manager's
// deploy/crds, prometheus-operator's CRDs). kubeconform's hosted schemas are not reachable
// here; the module proxy is.
//
// Layout: <out>/<group>/<kind>_<version>.json (group "v1" for the core group), read by
//
//	kubeconform -strict -schema-location '<out>/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json'
//
// "Strict" as kubeconform's own -strict schemas: every object schema that lists properties
// and allows nothing else gets additionalProperties: false, so a misspelt field fails.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

type schema = map[string]any

func main() {
	swagger := flag.String("swagger", "", "Kubernetes' swagger.json")
	out := flag.String("out", "", "output directory (replaced)")
	flag.Parse()
	if *swagger == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "usage: schemas -swagger swagger.json -out DIR [CRD file or directory...]")
		os.Exit(2)
	}
	files, err := generate(*swagger, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeconform schemas:", err)
		os.Exit(1)
	}
	if err := os.RemoveAll(*out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for name, b := range files {
		p := filepath.Join(*out, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			err = os.WriteFile(p, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	fmt.Printf("wrote %d schemas to %s\n", len(files), *out)
}

func generate(swaggerPath string, crdPaths []string) (map[string][]byte, error) {
	files := map[string][]byte{}
	raw, err := os.ReadFile(swaggerPath)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Definitions map[string]schema `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", swaggerPath, err)
	}
	defs := doc.Definitions
	// Types whose OpenAPI v2 form is a string but whose JSON accepts numbers too.
	defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = schema{"oneOf": []any{schema{"type": "string"}, schema{"type": "integer"}}}
	defs["io.k8s.apimachinery.pkg.api.resource.Quantity"] = schema{"oneOf": []any{schema{"type": "string"}, schema{"type": "number"}}}
	for _, d := range defs {
		strict(d)
	}
	for name, d := range defs {
		gvks, _ := d["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk := g.(map[string]any)
			group, version, kind := gvk["group"].(string), gvk["version"].(string), gvk["kind"].(string)
			if props, _ := d["properties"].(map[string]any); props["apiVersion"] == nil {
				continue
			}
			closure := map[string]any{}
			collect(defs, name, closure)
			s := schema{"$ref": "#/definitions/" + name, "definitions": closure}
			b, err := json.Marshal(s)
			if err != nil {
				return nil, err
			}
			files[path(group, version, kind)] = b
		}
	}
	for _, p := range crdPaths {
		if err := crdSchemas(p, files); err != nil {
			return nil, err
		}
	}
	return files, nil
}

func path(group, version, kind string) string {
	if group == "" {
		group = version
	}
	return filepath.Join(group, strings.ToLower(kind)+"_"+version+".json")
}

// collect adds name and every definition it references to closure.
func collect(defs map[string]schema, name string, closure map[string]any) {
	if _, done := closure[name]; done {
		return
	}
	d, ok := defs[name]
	if !ok {
		return
	}
	closure[name] = d
	walk(d, func(m map[string]any) {
		if ref, ok := m["$ref"].(string); ok {
			collect(defs, strings.TrimPrefix(ref, "#/definitions/"), closure)
		}
	})
}

func walk(v any, f func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		f(x)
		for _, c := range x {
			walk(c, f)
		}
	case []any:
		for _, c := range x {
			walk(c, f)
		}
	}
}

// strict closes every object schema that lists its properties, and turns the Kubernetes
// extensions JSON Schema does not know into their meaning.
func strict(s any) {
	walk(s, func(m map[string]any) {
		if m["x-kubernetes-int-or-string"] == true {
			delete(m, "type")
			m["anyOf"] = []any{schema{"type": "integer"}, schema{"type": "string"}}
		}
		if _, props := m["properties"]; props && m["x-kubernetes-preserve-unknown-fields"] != true {
			if _, set := m["additionalProperties"]; !set {
				m["additionalProperties"] = false
			}
		}
	})
}

// crdSchemas adds the schema of every version of the CRDs in p (a file or a directory).
func crdSchemas(p string, files map[string][]byte) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	paths := []string{p}
	if st.IsDir() {
		paths, _ = filepath.Glob(filepath.Join(p, "*.yaml"))
		sort.Strings(paths)
	}
	for _, f := range paths {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, docYAML := range bytes.Split(raw, []byte("\n---")) {
			var crd struct {
				Kind string `json:"kind"`
				Spec struct {
					Group string `json:"group"`
					Names struct {
						Kind string `json:"kind"`
					} `json:"names"`
					Versions []struct {
						Name   string `json:"name"`
						Schema struct {
							OpenAPIV3Schema schema `json:"openAPIV3Schema"`
						} `json:"schema"`
					} `json:"versions"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(docYAML, &crd); err != nil {
				return fmt.Errorf("parse %s: %w", f, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue
			}
			for _, v := range crd.Spec.Versions {
				s := v.Schema.OpenAPIV3Schema
				if s == nil {
					continue
				}
				strict(s)
				// metadata is validated by the apiserver, not by the CRD's schema.
				if props, ok := s["properties"].(map[string]any); ok {
					props["metadata"] = schema{"type": "object"}
				}
				b, err := json.Marshal(s)
				if err != nil {
					return err
				}
				files[path(crd.Spec.Group, v.Name, crd.Spec.Names.Kind)] = b
			}
		}
	}
	return nil
}
