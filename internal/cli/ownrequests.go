package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/widgetry/widget-operator/internal/apitraffic"
	"github.com/widgetry/widget-operator/internal/crd"
)

// Every command counts its own Widget requests at the transport (apitraffic.OwnCounter) and,
// when it ends, writes them into the traffic ledger of the Widget CRD, which the unserve and
// remove checks subtract them from: the runbooks' verify, backup, drill and status read
// through every served version, v1alpha1 included, and must not restart the window they wait
// for. Other CRDs a command may migrate are not counted: their gates are not ours.

// ownRequests is this run's counter, made on first use.
func (g *GlobalOptions) ownRequests() *apitraffic.OwnCounter {
	if g.own == nil {
		name := g.command
		if name == "" {
			name = "widgetctl"
		}
		plural, group, _ := strings.Cut(crd.WidgetName, ".")
		g.own = apitraffic.NewOwnCounter(group, plural, name)
	}
	return g.own
}

// recordOwnRequests writes what the run sent through the Widget API into the ledger of the
// records namespace, when a window is being counted (the ledger exists). It only warns when it
// cannot: the requests then count against the gate as another client's would, which is safe.
func (g *GlobalOptions) recordOwnRequests(ctx context.Context) {
	records := g.own.Take()
	if len(records) == 0 {
		return
	}
	if ctx.Err() != nil {
		// Interrupted: still record, briefly, what was sent.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	err := func() error {
		c, err := widgetClient(g)
		if err != nil {
			return err
		}
		ns := g.records
		if ns == "" {
			// The namespace the CRD names first: a command's -n may name the Widgets'
			// namespace (selftest) or another release's (migrate-release). Else -n, else the
			// context's, as findReleaseNamespace.
			found, err := releaseNamespaceOfCRD(ctx, c)
			if err != nil {
				return err
			}
			if ns = found.Namespace; ns == "" {
				ns = g.Namespace()
			}
		}
		return apitraffic.Ledger{Client: c, Namespace: ns, Name: apitraffic.LedgerName(crd.WidgetName)}.AppendOwn(ctx, records)
	}()
	if err != nil {
		var sent []string
		for _, r := range records {
			sent = append(sent, r.Version)
		}
		fmt.Fprintf(g.Stderr, "warning: this run's own Widget requests (through %s) could not be recorded: %v; the unserve and remove checks count them as another client's until their window passes (rerun with -n RELEASE_NAMESPACE)\n",
			strings.Join(sent, ", "), err)
	}
}
