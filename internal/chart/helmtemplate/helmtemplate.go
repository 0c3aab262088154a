// Package helmtemplate renders the chart with the helm CLI and reads what it rendered. It
// imports nothing of this project, so that test harnesses can render the chart without the
// chart package's generators (which import internal/monitoring).
package helmtemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"
)

// KubeVersion is the Kubernetes version charts are rendered for: the project's pinned one.
// Helm assumes v1.20 offline unless told, which Chart.yaml's kubeVersion rejects.
const KubeVersion = "v1.37.2"

// MonitoringAPIs are the API versions the monitoring templates look for in the capabilities.
var MonitoringAPIs = []string{"monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule"}

// Options say how to render the chart.
type Options struct {
	// Helm is the helm CLI to run (bin/helm3 or bin/helm4).
	Helm string
	// Chart is the chart directory.
	Chart string
	// Release and Namespace default to widget-operator and widget-system.
	Release, Namespace string
	// Values are written to a values file (YAML) and passed with -f.
	Values map[string]any
	// APIVersions are extra capabilities (--api-versions).
	APIVersions []string
	// ShowOnly renders only these templates (--show-only), e.g. templates/tests/selftest-pod.yaml.
	ShowOnly []string
}

// Render runs helm template and returns the output; an error carries helm's message.
func Render(o Options) ([]byte, error) {
	release, ns := o.Release, o.Namespace
	if release == "" {
		release = "widget-operator"
	}
	if ns == "" {
		ns = "widget-system"
	}
	args := []string{"template", release, o.Chart, "--namespace", ns, "--kube-version", KubeVersion}
	for _, a := range o.APIVersions {
		args = append(args, "--api-versions", a)
	}
	for _, s := range o.ShowOnly {
		args = append(args, "--show-only", s)
	}
	if o.Values != nil {
		f, err := os.CreateTemp("", "chart-values-*.yaml")
		if err != nil {
			return nil, err
		}
		defer os.Remove(f.Name())
		b, err := sigsyaml.Marshal(o.Values)
		if err == nil {
			_, err = f.Write(b)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		args = append(args, "--values", f.Name())
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(o.Helm, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", o.Helm, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Objects is a rendered chart.
type Objects []*unstructured.Unstructured

// Parse splits a multi-document YAML stream into objects, refusing duplicate keys (which
// YAML-to-JSON conversion would silently collapse).
func Parse(manifests []byte) (Objects, error) {
	dec := yaml.NewDecoder(bytes.NewReader(manifests))
	var out Objects
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse the rendered chart: %w", err)
		}
		if doc == nil {
			continue
		}
		j, err := json.Marshal(doc)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("parse the rendered chart: %w", err)
		}
		out = append(out, u)
	}
}

// Get returns the object of kind and name, or nil.
func (objs Objects) Get(kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// Kind returns every object of kind.
func (objs Objects) Kind(kind string) Objects {
	var out Objects
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Into converts o into a typed object (e.g. *appsv1.Deployment), strictly.
func Into(o *unstructured.Unstructured, typed any) error {
	j, err := o.MarshalJSON()
	if err != nil {
		return err
	}
	if err := sigsyaml.UnmarshalStrict(j, typed); err != nil {
		return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
	}
	return nil
}
