package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStripManagedFields(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op}
	}
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		kept    bool
	}{
		{"applied by the controller, status by another manager", []metav1.ManagedFieldsEntry{entry(FieldManager, metav1.ManagedFieldsOperationApply), entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate)}, false},
		{"created by the controller, not yet upgraded", []metav1.ManagedFieldsEntry{entry(FieldManager, metav1.ManagedFieldsOperationUpdate), entry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate)}, true},
		{"another manager's update only", []metav1.ManagedFieldsEntry{entry("kubectl", metav1.ManagedFieldsOperationUpdate)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", ManagedFields: tc.entries}}
			out, err := StripManagedFields()(d)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*appsv1.Deployment).ManagedFields
			if kept := len(got) == len(tc.entries); kept != tc.kept {
				t.Errorf("managedFields %v after the transform; want kept=%v", got, tc.kept)
			}
		})
	}
	if out, err := StripManagedFields()("not an object"); err != nil || out != "not an object" {
		t.Errorf("a non-object: %v, %v", out, err)
	}
}
