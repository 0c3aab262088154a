package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/widgetry/widget-operator/api/v1"
)

// The tests below hold computeStatus to its contract, one test per condition, each a table of
// inputs (the Widget, its Deployment, the reconcile's error) and the exact condition expected.
// They need no apiserver.

// widgetGeneration is the generation of every test Widget; conditions must carry it.
const widgetGeneration = 4

// testWidget returns a Widget with spec.size size (nil: unset, which means 1) and spec.paused.
func testWidget(size *int32, paused bool) *v1.Widget {
	return &v1.Widget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "shop", Generation: widgetGeneration},
		Spec:       v1.WidgetSpec{Size: size, Image: "srv:1", Paused: ptr.To(paused)},
	}
}

// deploymentStatus describes the Widget's Deployment as the controller reads it.
type deploymentStatus struct {
	generation, observedGeneration int64
	replicas, updated, available   int32
}

func (d deploymentStatus) deployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "shop", Generation: d.generation},
		Status: appsv1.DeploymentStatus{ObservedGeneration: d.observedGeneration,
			Replicas: d.replicas, UpdatedReplicas: d.updated, AvailableReplicas: d.available},
	}
}

// rolledOut is a Deployment of n replicas that has observed its spec and rolled it out.
func rolledOut(n int32) *appsv1.Deployment {
	return deploymentStatus{generation: 2, observedGeneration: 2, replicas: n, updated: n, available: n}.deployment()
}

// conditionCase is one row of a condition's table.
type conditionCase struct {
	name         string
	widget       *v1.Widget
	deployment   *appsv1.Deployment // nil: no Deployment yet
	reconcileErr error
	wantStatus   metav1.ConditionStatus
	wantReason   string
	wantMessage  string
}

// runConditionCases computes the status of each case and checks the condition of type
// conditionType: status, reason, message and observedGeneration.
func runConditionCases(t *testing.T, conditionType string, cases []conditionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := computeStatus(tc.widget, v1.WidgetStatus{}, tc.deployment, tc.reconcileErr)
			c := meta.FindStatusCondition(got.Conditions, conditionType)
			if c == nil {
				t.Fatalf("no %s condition in %+v", conditionType, got.Conditions)
			}
			if c.Status != tc.wantStatus || c.Reason != tc.wantReason {
				t.Errorf("%s = %s/%s, want %s/%s (message %q)", conditionType, c.Status, c.Reason, tc.wantStatus, tc.wantReason, c.Message)
			}
			if c.Message != tc.wantMessage {
				t.Errorf("%s message = %q, want %q", conditionType, c.Message, tc.wantMessage)
			}
			if c.ObservedGeneration != widgetGeneration {
				t.Errorf("%s observedGeneration = %d, want the Widget's generation %d", conditionType, c.ObservedGeneration, widgetGeneration)
			}
			if c.LastTransitionTime.IsZero() {
				t.Errorf("%s has no lastTransitionTime", conditionType)
			}
		})
	}
}

func TestComputeStatusReady(t *testing.T) {
	longErr := errors.New(strings.Repeat("x", 2000))
	runConditionCases(t, v1.ConditionReady, []conditionCase{{
		name:         "a failed reconcile makes Ready False with the error as message",
		widget:       testWidget(ptr.To[int32](3), false),
		reconcileErr: errors.New("apply Deployment apps/shop: forbidden"),
		wantStatus:   metav1.ConditionFalse, wantReason: v1.ReasonReconcileFailed,
		wantMessage: "apply Deployment apps/shop: forbidden",
	}, {
		name:         "a failed reconcile wins over an available Deployment",
		widget:       testWidget(ptr.To[int32](3), false),
		deployment:   rolledOut(3),
		reconcileErr: errors.New("boom"),
		wantStatus:   metav1.ConditionFalse, wantReason: v1.ReasonReconcileFailed, wantMessage: "boom",
	}, {
		name:         "the error message is cut at 1024 bytes",
		widget:       testWidget(nil, false),
		reconcileErr: longErr,
		wantStatus:   metav1.ConditionFalse, wantReason: v1.ReasonReconcileFailed, wantMessage: strings.Repeat("x", 1024),
	}, {
		name:       "no Deployment yet",
		widget:     testWidget(ptr.To[int32](3), false),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonDeploymentMissing, wantMessage: "the Deployment does not exist yet",
	}, {
		name:       "every replica updated and available",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: rolledOut(3),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonAvailable, wantMessage: "3 of 3 replicas available",
	}, {
		name:       "unset size means one replica",
		widget:     testWidget(nil, false),
		deployment: rolledOut(1),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonAvailable, wantMessage: "1 of 1 replicas available",
	}, {
		name:       "unset size with no replica available",
		widget:     testWidget(nil, false),
		deployment: deploymentStatus{generation: 1, observedGeneration: 1, replicas: 1, updated: 1}.deployment(),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonReplicasUnavailable, wantMessage: "0 of 1 replicas available",
	}, {
		name:       "size 0 is ready with nothing running",
		widget:     testWidget(ptr.To[int32](0), false),
		deployment: rolledOut(0),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonAvailable, wantMessage: "0 of 0 replicas available",
	}, {
		name:       "fewer replicas available than desired",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: deploymentStatus{generation: 2, observedGeneration: 2, replicas: 3, updated: 3, available: 2}.deployment(),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonReplicasUnavailable, wantMessage: "2 of 3 replicas available",
	}, {
		name:       "available but not yet updated to the current template",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: deploymentStatus{generation: 2, observedGeneration: 2, replicas: 4, updated: 1, available: 3}.deployment(),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonReplicasUnavailable, wantMessage: "3 of 3 replicas available",
	}, {
		name:       "the Deployment has not observed its latest spec",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: deploymentStatus{generation: 3, observedGeneration: 2, replicas: 3, updated: 3, available: 3}.deployment(),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonReplicasUnavailable, wantMessage: "3 of 3 replicas available",
	}, {
		name:       "more available than desired while scaling down is still ready",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: deploymentStatus{generation: 2, observedGeneration: 2, replicas: 5, updated: 3, available: 5}.deployment(),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonAvailable, wantMessage: "5 of 3 replicas available",
	}, {
		name:       "pausing does not affect Ready",
		widget:     testWidget(ptr.To[int32](2), true),
		deployment: rolledOut(2),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonAvailable, wantMessage: "2 of 2 replicas available",
	}})
}

func TestComputeStatusProgressing(t *testing.T) {
	runConditionCases(t, v1.ConditionProgressing, []conditionCase{{
		name:         "a failed reconcile stops progress",
		widget:       testWidget(ptr.To[int32](3), false),
		deployment:   deploymentStatus{generation: 2, observedGeneration: 2, replicas: 3, updated: 1, available: 1}.deployment(),
		reconcileErr: errors.New("boom"),
		wantStatus:   metav1.ConditionFalse, wantReason: v1.ReasonReconcileFailed,
		wantMessage: "the controller could not apply the Widget's children; see events",
	}, {
		name:         "a failed reconcile wins over paused",
		widget:       testWidget(ptr.To[int32](3), true),
		reconcileErr: errors.New("boom"),
		wantStatus:   metav1.ConditionFalse, wantReason: v1.ReasonReconcileFailed,
		wantMessage: "the controller could not apply the Widget's children; see events",
	}, {
		name:       "no Deployment yet: it is being created",
		widget:     testWidget(ptr.To[int32](3), false),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonRollingOut, wantMessage: "creating the Deployment",
	}, {
		name:       "no Deployment yet, even when paused",
		widget:     testWidget(ptr.To[int32](3), true),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonRollingOut, wantMessage: "creating the Deployment",
	}, {
		name:       "rolled out",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: rolledOut(3),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonRolloutComplete, wantMessage: "the Deployment has rolled out",
	}, {
		name:       "rolled out at size 0",
		widget:     testWidget(ptr.To[int32](0), false),
		deployment: rolledOut(0),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonRolloutComplete, wantMessage: "the Deployment has rolled out",
	}, {
		name:       "paused mid-rollout",
		widget:     testWidget(ptr.To[int32](3), true),
		deployment: deploymentStatus{generation: 2, observedGeneration: 2, replicas: 4, updated: 1, available: 3}.deployment(),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonPaused,
		wantMessage: "the Widget is paused; its Deployment does not roll out changes",
	}, {
		name:       "paused after the rollout",
		widget:     testWidget(ptr.To[int32](3), true),
		deployment: rolledOut(3),
		wantStatus: metav1.ConditionFalse, wantReason: v1.ReasonPaused,
		wantMessage: "the Widget is paused; its Deployment does not roll out changes",
	}, {
		name:       "the Deployment has not observed its latest spec",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: deploymentStatus{generation: 3, observedGeneration: 2, replicas: 3, updated: 3, available: 3}.deployment(),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonRollingOut, wantMessage: "3 of 3 replicas updated",
	}, {
		name:       "replicas not yet updated",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: deploymentStatus{generation: 2, observedGeneration: 2, replicas: 4, updated: 1, available: 3}.deployment(),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonRollingOut, wantMessage: "1 of 3 replicas updated",
	}, {
		name:       "old replicas still running after the update (scaling down)",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: deploymentStatus{generation: 2, observedGeneration: 2, replicas: 5, updated: 3, available: 5}.deployment(),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonRollingOut, wantMessage: "3 of 3 replicas updated",
	}, {
		name:       "updated replicas not yet available",
		widget:     testWidget(ptr.To[int32](3), false),
		deployment: deploymentStatus{generation: 2, observedGeneration: 2, replicas: 3, updated: 3, available: 2}.deployment(),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonRollingOut, wantMessage: "3 of 3 replicas updated",
	}, {
		name:       "unset size means one replica",
		widget:     testWidget(nil, false),
		deployment: deploymentStatus{generation: 1, observedGeneration: 1, replicas: 1, updated: 0, available: 1}.deployment(),
		wantStatus: metav1.ConditionTrue, wantReason: v1.ReasonRollingOut, wantMessage: "0 of 1 replicas updated",
	}})
}

// TestComputeStatusFields covers the status fields next to the conditions: observedGeneration
// and availableReplicas, which a failed reconcile leaves as they were.
func TestComputeStatusFields(t *testing.T) {
	old := v1.WidgetStatus{AvailableReplicas: 7, ObservedGeneration: 1}
	for _, tc := range []struct {
		name          string
		deployment    *appsv1.Deployment
		reconcileErr  error
		wantAvailable int32
	}{
		{name: "from the Deployment", deployment: deploymentStatus{generation: 2, observedGeneration: 2, replicas: 3, updated: 3, available: 2}.deployment(), wantAvailable: 2},
		{name: "no Deployment: zero", wantAvailable: 0},
		{name: "a failed reconcile keeps the last value", deployment: rolledOut(3), reconcileErr: errors.New("boom"), wantAvailable: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := computeStatus(testWidget(ptr.To[int32](3), false), old, tc.deployment, tc.reconcileErr)
			if got.AvailableReplicas != tc.wantAvailable {
				t.Errorf("availableReplicas = %d, want %d", got.AvailableReplicas, tc.wantAvailable)
			}
			if got.ObservedGeneration != widgetGeneration {
				t.Errorf("observedGeneration = %d, want %d", got.ObservedGeneration, widgetGeneration)
			}
			if len(got.Conditions) != 2 {
				t.Errorf("conditions = %+v, want exactly Ready and Progressing", got.Conditions)
			}
		})
	}
}

// TestComputeStatusTransitionTime: a condition keeps its lastTransitionTime while its status
// stays, even when its reason or message change, and gets a new one when its status changes.
// The old status is not modified.
func TestComputeStatusTransitionTime(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	old := v1.WidgetStatus{Conditions: []metav1.Condition{
		{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonDeploymentMissing, LastTransitionTime: then, ObservedGeneration: 3},
		{Type: v1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: v1.ReasonRollingOut, LastTransitionTime: then, ObservedGeneration: 3},
	}}
	snapshot := old.DeepCopy()
	// Ready stays False (DeploymentMissing -> ReplicasUnavailable), Progressing stays True.
	got := computeStatus(testWidget(ptr.To[int32](3), false), old,
		deploymentStatus{generation: 2, observedGeneration: 2, replicas: 3, updated: 3, available: 1}.deployment(), nil)
	for _, ct := range []string{v1.ConditionReady, v1.ConditionProgressing} {
		if c := meta.FindStatusCondition(got.Conditions, ct); c == nil || !c.LastTransitionTime.Equal(&then) {
			t.Errorf("%s changed its lastTransitionTime without a status change: %+v", ct, c)
		}
	}
	if c := meta.FindStatusCondition(got.Conditions, v1.ConditionReady); c.Reason != v1.ReasonReplicasUnavailable {
		t.Errorf("Ready reason = %s, want %s", c.Reason, v1.ReasonReplicasUnavailable)
	}

	// Both flip: Ready False -> True, Progressing True -> False.
	got = computeStatus(testWidget(ptr.To[int32](3), false), old, rolledOut(3), nil)
	for _, ct := range []string{v1.ConditionReady, v1.ConditionProgressing} {
		if c := meta.FindStatusCondition(got.Conditions, ct); c == nil || !c.LastTransitionTime.After(then.Time) {
			t.Errorf("%s changed status but kept lastTransitionTime %v: %+v", ct, then, c)
		}
	}

	if !equalConditions(old.Conditions, snapshot.Conditions) {
		t.Errorf("computeStatus modified the old status: %+v, was %+v", old.Conditions, snapshot.Conditions)
	}
}

func equalConditions(a, b []metav1.Condition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Type != b[i].Type || a[i].Status != b[i].Status || a[i].Reason != b[i].Reason ||
			a[i].Message != b[i].Message || a[i].ObservedGeneration != b[i].ObservedGeneration ||
			!a[i].LastTransitionTime.Equal(&b[i].LastTransitionTime) {
			return false
		}
	}
	return true
}
