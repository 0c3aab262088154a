package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/widgetry/widget-operator/internal/crd"
	"github.com/widgetry/widget-operator/internal/crd/crdcel"
)

// imageCorpus holds references on both sides of every branch of the grammar: domains with
// ports and uppercase, IPv6 hosts, separators, tags at their length limit, digests of each
// algorithm go-digest knows and of ones it does not, and the 64-hex image ID.
var imageCorpus = []string{
	"nginx", "nginx:1.27", "library/nginx", "docker.io/library/nginx:latest",
	"registry.example.com/team/server:v1.2.3", "Registry.Example.com/team/server:v1",
	"localhost/app", "localhost:5000/app:dev", "[::1]:5000/app", "[fe80::1]/app", "[::1/app",
	"foo_bar/baz", "a_b.c/d", "A_B/c", "Foo/bar", "foo/Bar", "team/Server:v1", "Foo:v1",
	"a__b", "a___b", "a--b", "a.-b", "-a", "a-", "a/", "/a", "a//b", "a:", "a:-x", "a:_x",
	"a:" + strings.Repeat("t", 128), "a:" + strings.Repeat("t", 129),
	"a@sha256:" + strings.Repeat("0", 64), "a@sha256:" + strings.Repeat("0", 63),
	"a@sha256:" + strings.Repeat("A", 64), "a@sha384:" + strings.Repeat("f", 96),
	"a@sha512:" + strings.Repeat("e", 128), "a@md5:" + strings.Repeat("0", 32),
	"a:v1@sha256:" + strings.Repeat("1", 64), "a@sha256:" + strings.Repeat("0", 64) + ":v1",
	strings.Repeat("a", 64), strings.Repeat("f", 64), strings.Repeat("f", 63), strings.Repeat("f", 65),
	"foo:bar/baz", "foo:5000/bar", "foo:5000", "host.with.dots:443/a/b/c:tag",
	"Bad Image", "a b", "ä", "a\tb", "a\n", "",
}

// The CRD's image rule refuses exactly what the webhook's parser (the kubelet's) refuses, in
// both versions, so that the apiserver can enforce it with our pods gone. Only names that
// pass 255 characters once normalized (docker.io/library/...) are the webhook's alone.
func TestCRDImageRuleIsTheKubeletGrammar(t *testing.T) {
	for _, version := range []string{"v1alpha1", "v1"} {
		v := imageValidator(t, version)
		for _, image := range imageCorpus {
			checkImageRule(t, v, version, image)
		}
	}
}

// FuzzCRDImageRule holds the CRD's rule against the parser on any string.
func FuzzCRDImageRule(f *testing.F) {
	for _, image := range imageCorpus {
		f.Add(image)
	}
	v := imageValidator(f, "v1")
	f.Fuzz(func(t *testing.T, image string) {
		checkImageRule(t, v, "v1", image)
	})
}

func imageValidator(tb testing.TB, version string) *crdcel.Validator {
	tb.Helper()
	v, err := crdcel.New(crd.Widget(), version)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func checkImageRule(t *testing.T, v *crdcel.Validator, version, image string) {
	t.Helper()
	if strings.TrimSpace(image) == "" || len(image) > 200 {
		return // the rule "image must not be empty", MaxLength, and the normalized-length limit
	}
	obj, err := json.Marshal(map[string]any{"apiVersion": "widgetry.io/" + version, "kind": "Widget",
		"metadata": map[string]any{"name": "w"}, "spec": map[string]any{"image": image}})
	if err != nil {
		t.Fatal(err)
	}
	errs, err := v.Validate(obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, parseErr := parseImage(image)
	if (len(errs) == 0) != (parseErr == nil) {
		t.Errorf("%s: image %q: the CRD's rule says %v, the kubelet's parser %v", version, image, errs, parseErr)
	}
	if len(errs) > 0 && !strings.Contains(errs.ToAggregate().Error(), "spec.image") {
		t.Errorf("%s: image %q refused without its field path: %v", version, image, errs)
	}
}
