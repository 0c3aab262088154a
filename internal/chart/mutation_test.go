//go:build envtest

package chart

import (
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// mutatingAdmissionPolicyAPI is the capability of a cluster serving MutatingAdmissionPolicy.
const mutatingAdmissionPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

// keeping is what a render keeps v1-only fields with.
type keeping struct {
	webhook *admissionregistrationv1.MutatingWebhookConfiguration
	policy  *admissionregistrationv1.MutatingAdmissionPolicy
	binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
}

func keepingOf(t *testing.T, objs helmtemplate.Objects) keeping {
	t.Helper()
	k := keeping{webhook: &admissionregistrationv1.MutatingWebhookConfiguration{}}
	if err := helmtemplate.Into(objs.Get("MutatingWebhookConfiguration", "widget-operator"), k.webhook); err != nil {
		t.Fatal(err)
	}
	if u := objs.Get("MutatingAdmissionPolicy", "widgets.widgetry.io-keep-v1-fields"); u != nil {
		k.policy = &admissionregistrationv1.MutatingAdmissionPolicy{}
		if err := helmtemplate.Into(u, k.policy); err != nil {
			t.Fatal(err)
		}
	}
	if u := objs.Get("MutatingAdmissionPolicyBinding", "widgets.widgetry.io-keep-v1-fields"); u != nil {
		k.binding = &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
		if err := helmtemplate.Into(u, k.binding); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(objs.Kind("MutatingAdmissionPolicy")) + len(objs.Kind("MutatingAdmissionPolicyBinding")); n != 0 && (k.policy == nil || k.binding == nil || n != 2) {
		t.Fatalf("want the policy and its binding or neither; got %d objects", n)
	}
	return k
}

func conditionNames(cs []admissionregistrationv1.MatchCondition) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// checkKeepingRoute: with the policy, it and its binding are rendered as the feature needs
// them (v1alpha1 UPDATEs only, matched Exactly, failing closed, the webhook's own conditions
// first) and the webhook is called only for what the policy did not keep; without it, the
// webhook is configured as before the policy existed.
func checkKeepingRoute(t *testing.T, objs helmtemplate.Objects, wantPolicy bool) {
	t.Helper()
	k := keepingOf(t, objs)
	wh := k.webhook.Webhooks[0]
	names := conditionNames(wh.MatchConditions)
	if !wantPolicy {
		if k.policy != nil {
			t.Fatal("the MutatingAdmissionPolicy is rendered")
		}
		if !slices.Equal(names, []string{"changes-spec-or-annotations", "through-v1alpha1"}) {
			t.Errorf("webhook matchConditions %v, want those of the webhook route", names)
		}
		return
	}
	if k.policy == nil {
		t.Fatal("no MutatingAdmissionPolicy rendered")
	}
	if !slices.Equal(names, []string{"changes-spec-or-annotations", "through-v1alpha1", "not-kept-by-policy"}) {
		t.Errorf("webhook matchConditions %v, want the policy route's", names)
	}
	p := k.policy.Spec
	if k.binding.Spec.PolicyName != k.policy.Name {
		t.Errorf("the binding names %q, the policy is %q", k.binding.Spec.PolicyName, k.policy.Name)
	}
	if *p.FailurePolicy != admissionregistrationv1.Fail || p.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("failurePolicy %v reinvocationPolicy %v, want Fail and IfNeeded", *p.FailurePolicy, p.ReinvocationPolicy)
	}
	rules := p.MatchConstraints.ResourceRules
	if *p.MatchConstraints.MatchPolicy != admissionregistrationv1.Exact || len(rules) != 1 ||
		!slices.Equal(rules[0].APIVersions, []string{"v1alpha1"}) || !slices.Equal(rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}) ||
		!slices.Equal(rules[0].Resources, []string{"widgets"}) {
		t.Errorf("matchConstraints %+v, want v1alpha1 widgets UPDATE matched Exactly", p.MatchConstraints)
	}
	if got := conditionNames(p.MatchConditions); !slices.Equal(got, []string{"changes-spec-or-annotations", "canonical-conversion-data"}) {
		t.Errorf("policy matchConditions %v", got)
	} else if p.MatchConditions[0].Expression != wh.MatchConditions[0].Expression {
		t.Errorf("the policy's changes-spec-or-annotations differs from the webhook's:\n%s\n%s", p.MatchConditions[0].Expression, wh.MatchConditions[0].Expression)
	}
	if len(p.Mutations) != 1 || p.Mutations[0].PatchType != admissionregistrationv1.PatchTypeJSONPatch {
		t.Errorf("mutations %+v, want one JSON patch", p.Mutations)
	}
}

// TestKeepingRouteChosenAtRender: webhook.mutation auto renders the policy exactly when the
// cluster's API versions list MutatingAdmissionPolicy in admissionregistration.k8s.io/v1
// (helm install reads them from the cluster; helm template offline lists no kinds), policy
// and webhook force a route, with Helm 3 and Helm 4.
func TestKeepingRouteChosenAtRender(t *testing.T) {
	for name, helm := range helms(t) {
		for _, tc := range []struct {
			name       string
			mutation   string
			apis       []string
			wantPolicy bool
		}{
			{"offline", "", nil, false},
			{"serving the policy", "", []string{mutatingAdmissionPolicyAPI}, true},
			{"serving the group version only", "", []string{"admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"}, false},
			{"serving it in v1beta1 only", "", []string{"admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"}, false},
			{"auto", "auto", []string{mutatingAdmissionPolicyAPI}, true},
			{"webhook forced", "webhook", []string{mutatingAdmissionPolicyAPI}, false},
			{"policy forced", "policy", nil, true},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				var values map[string]any
				if tc.mutation != "" {
					values = set("webhook.mutation", tc.mutation)
				}
				checkKeepingRoute(t, renderWith(t, helm, values, tc.apis...), tc.wantPolicy)
			})
		}
	}
}
