package migrate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestProgressObjectName(t *testing.T) {
	if got := ProgressObjectName("widgets.widgetry.io"); got != "widget-migration-widgets.widgetry.io" {
		t.Errorf("got %q", got)
	}
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + ".io"
	a, b := ProgressObjectName(long), ProgressObjectName(long[:len(long)-3]+".com")
	for _, n := range []string{a, b} {
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("%q is not a valid name: %v", n, errs)
		}
	}
	if a == b {
		t.Errorf("two long CRD names share the progress object %q", a)
	}
}

func TestProgressRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 30, 6, 0, 0, 123, time.UTC)
	p := Progress{CRD: "widgets.widgetry.io", Group: "widgetry.io", Resource: "widgets", StorageVersion: "v1",
		CRDGeneration: 4, CRDUID: "5e1f", StoredVersionsAtStart: []string{"v1alpha1", "v1"}, Backend: "client", Phase: PhaseRunning,
		Holder: "host/1", StartTime: now, LastProgressTime: now.Add(time.Second), Continue: "tok", LastKey: "ns/w-1",
		Counts: Counts{Migrated: 5, Unchanged: 1, Conflict: 2, NotFound: 3, Error: 4}, Total: 20, Attempts: 2, Message: "m"}
	got := DecodeProgress(&corev1.ConfigMap{Data: p.encode()})
	if d := cmp.Diff(p, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	// Hand-edited garbage reads as zero rather than failing a scrape.
	if got := DecodeProgress(&corev1.ConfigMap{Data: map[string]string{KeyMigrated: "many", KeyStartTime: "yesterday"}}); got.Counts.Migrated != 0 || !got.StartTime.IsZero() {
		t.Errorf("garbage decoded as %+v", got)
	}
}

func crdWith(storage string, generation int64, stored ...string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.widgetry.io", Generation: generation},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
			{Name: "v1alpha1", Served: true, Storage: storage == "v1alpha1"}, {Name: "v1", Served: true, Storage: storage == "v1"}}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: stored},
	}
}

func TestCheckTrim(t *testing.T) {
	want := TrimExpectation{StorageVersion: "v1", Generation: 3, StoredVersionsAtStart: []string{"v1alpha1", "v1"}}
	for _, tc := range []struct {
		name    string
		crd     *apiextensionsv1.CustomResourceDefinition
		refusal string
	}{
		{"unchanged", crdWith("v1", 3, "v1alpha1", "v1"), ""},
		{"already trimmed", crdWith("v1", 3, "v1"), ""},
		{"storage flipped", crdWith("v1alpha1", 4, "v1alpha1", "v1"), "the storage version of CRD widgets.widgetry.io changed from v1 to v1alpha1"},
		{"flipped and back", crdWith("v1", 5, "v1alpha1", "v1"), "generation 3 -> 5"},
		{"new stored version", crdWith("v1", 3, "v1alpha1", "v1", "v2"), "version v2 of CRD widgets.widgetry.io was stored during the migration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkTrim(tc.crd, want)
			if tc.refusal == "" && err != nil || tc.refusal != "" && (!IsRefused(err) || !strings.Contains(err.Error(), tc.refusal)) {
				t.Errorf("got %v, want %q", err, tc.refusal)
			}
		})
	}
}

func TestStoragePatchHint(t *testing.T) {
	got := storagePatchHint(crdWith("v1", 1), "v1alpha1")
	want := `kubectl patch crd widgets.widgetry.io --type=json -p '[{"op":"replace","path":"/spec/versions/0/storage","value":true},{"op":"replace","path":"/spec/versions/1/storage","value":false}]'`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := storagePatchHint(crdWith("v1", 1), "v2"); !strings.Contains(got, "has no version v2") {
		t.Errorf("got %s", got)
	}
}

func TestCanResume(t *testing.T) {
	tg := &target{storage: "v1", generation: 3, uid: "u1"}
	for _, tc := range []struct {
		p    Progress
		want bool
	}{
		{Progress{Phase: PhaseRunning, StorageVersion: "v1", CRDGeneration: 3, CRDUID: "u1", SealedBy: "hook"}, true},
		{Progress{Phase: PhaseFailed, StorageVersion: "v1", CRDGeneration: 3, CRDUID: "u1", SealedBy: "hook"}, true},
		{Progress{Phase: PhaseSucceeded, StorageVersion: "v1", CRDGeneration: 3, CRDUID: "u1", SealedBy: "hook"}, false},
		{Progress{Phase: PhaseRunning, StorageVersion: "v1alpha1", CRDGeneration: 3, CRDUID: "u1", SealedBy: "hook"}, false},
		{Progress{Phase: PhaseRunning, StorageVersion: "v1", CRDGeneration: 2, CRDUID: "u1", SealedBy: "hook"}, false},
		// The CRD was deleted and created again: same generation, another uid.
		{Progress{Phase: PhaseRunning, StorageVersion: "v1", CRDGeneration: 3, CRDUID: "u0", SealedBy: "hook"}, false},
		// A checkpoint without the uid (by hand, or forged): a full pass.
		{Progress{Phase: PhaseRunning, StorageVersion: "v1", CRDGeneration: 3, LastKey: "~", SealedBy: "hook"}, false},
		// Everything matches but the seal only the chart's migrate hook may write: a checkpoint
		// a cluster admin forged, or one a run by hand left. A full pass.
		{Progress{Phase: PhaseRunning, StorageVersion: "v1", CRDGeneration: 3, CRDUID: "u1", LastKey: "~"}, false},
	} {
		if got := canResume(tc.p, tg); got != tc.want {
			t.Errorf("canResume(%+v) = %v, want %v", tc.p, got, tc.want)
		}
	}
}
