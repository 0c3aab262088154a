//go:build envtest

package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/widgetry/widget-operator/internal/chart/helmtemplate"
)

// rbacRow is one row of the chart README's RBAC table without its "why": a ServiceAccount,
// where the grant holds, one resource (group/resource, or a URL), the names it is limited to
// and the verbs.
type rbacRow struct{ account, where, resource, names, verbs string }

func (r rbacRow) String() string {
	return fmt.Sprintf("| `%s` | %s | `%s` | %s | %s |", r.account, r.where, r.resource, r.names, r.verbs)
}

// renderedRBAC is every grant of the chart at its defaults, one row per ServiceAccount, rule
// and resource; a ClusterRole no binding names is listed under the account "(yours to bind)".
func renderedRBAC(t *testing.T) []rbacRow {
	t.Helper()
	objs := render(t, nil)
	rules := map[string][]rbacv1.PolicyRule{} // "Kind/name" → rules
	for _, kind := range []string{"Role", "ClusterRole"} {
		for _, o := range objs.Kind(kind) {
			var role rbacv1.ClusterRole // a Role's rules decode the same
			if err := helmtemplate.Into(o, &role); err != nil {
				t.Fatal(err)
			}
			rules[kind+"/"+o.GetName()] = role.Rules
		}
	}
	var rows []rbacRow
	bound := map[string]bool{}
	add := func(account, where string, rs []rbacv1.PolicyRule) {
		for _, r := range rs {
			names := "all"
			if len(r.ResourceNames) > 0 {
				names = strings.Join(r.ResourceNames, ", ")
			}
			verbs := strings.Join(r.Verbs, ", ")
			for _, url := range r.NonResourceURLs {
				rows = append(rows, rbacRow{account, where, "URL " + url, names, verbs})
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					if g == "" {
						g = "core"
					}
					rows = append(rows, rbacRow{account, where, g + "/" + res, names, verbs})
				}
			}
		}
	}
	for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
		for _, o := range objs.Kind(kind) {
			var b rbacv1.RoleBinding
			if err := helmtemplate.Into(o, &b); err != nil {
				t.Fatal(err)
			}
			where := "cluster"
			if kind == "RoleBinding" {
				where = "namespace " + b.Namespace
			}
			ref := b.RoleRef.Kind + "/" + b.RoleRef.Name
			bound[ref] = true
			for _, s := range b.Subjects {
				if s.Kind != rbacv1.ServiceAccountKind {
					t.Errorf("%s %s binds %s %s: the chart binds ServiceAccounts only", kind, b.Name, s.Kind, s.Name)
				}
				add(s.Name, where, rules[ref])
			}
		}
	}
	for ref, rs := range rules {
		if !bound[ref] {
			add("(yours to bind)", "cluster", rs)
		}
	}
	return rows
}

// TestRBACTable: the chart README's RBAC table lists exactly what the chart grants at its
// defaults: every ServiceAccount, where, every resource, names and verbs (and says why).
func TestRBACTable(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## RBAC\n")
	if !ok {
		t.Fatal("the chart README has no \"## RBAC\" section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var documented []rbacRow
	for line := range strings.Lines(section) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 8 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		cell := func(i int) string { return strings.Trim(strings.TrimSpace(cells[i]), "`") }
		if cell(6) == "" {
			t.Errorf("RBAC table row %q does not say why", strings.TrimSpace(line))
		}
		documented = append(documented, rbacRow{cell(1), cell(2), cell(3), cell(4), cell(5)})
	}
	rendered := renderedRBAC(t)
	for _, r := range rendered {
		if !slices.Contains(documented, r) {
			t.Errorf("the chart grants what the README's RBAC table does not list; add the row (and why):\n%s", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(rendered, r) {
			t.Errorf("the README's RBAC table lists what the chart does not grant; remove the row:\n%s", r)
		}
	}
}
