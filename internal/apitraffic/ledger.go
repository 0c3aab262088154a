package apitraffic

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LedgerName is the ConfigMap the samples of a CRD are kept in, in the operator's namespace.
func LedgerName(crdName string) string { return "widget-api-traffic-" + crdName }

// ledgerKey is the ConfigMap key holding the samples as JSON.
const ledgerKey = "samples.json"

// keptSamples bounds the unmarked samples kept (the newest); the newest sample of each mark is
// always kept.
const keptSamples = 48

// Ledger keeps samples in a ConfigMap, so that checks run minutes or days apart, from hook
// pods or laptops, compare with each other.
type Ledger struct {
	Client          client.Client
	Namespace, Name string
}

// Load returns the samples, oldest first; none when the ConfigMap does not exist.
func (l Ledger) Load(ctx context.Context) ([]Sample, error) {
	cm := &corev1.ConfigMap{}
	if err := l.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the request counts recorded in ConfigMap %s/%s: %w", l.Namespace, l.Name, err)
	}
	return decode(cm, l)
}

func decode(cm *corev1.ConfigMap, l Ledger) ([]Sample, error) {
	var samples []Sample
	if data := cm.Data[ledgerKey]; data != "" {
		if err := json.Unmarshal([]byte(data), &samples); err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s key %s is not the samples this tool writes (%w): delete it to start counting afresh", l.Namespace, l.Name, ledgerKey, err)
		}
	}
	return samples, nil
}

// Append adds s, keeping the newest sample of each mark and the newest keptSamples others (an
// older sample of a mark stays as an ordinary one: it is still a baseline for later checks).
func (l Ledger) Append(ctx context.Context, s Sample) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		err := l.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Name}, cm)
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return err
		}
		samples, err := decode(cm, l)
		if err != nil {
			return err
		}
		data, err := json.Marshal(prune(append(samples, s)))
		if err != nil {
			return err
		}
		if create {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "widgetctl", "app.kubernetes.io/part-of": "widget-operator"}}}
		}
		cm.Data = map[string]string{ledgerKey: string(data)}
		if create {
			return l.Client.Create(ctx, cm)
		}
		return l.Client.Update(ctx, cm)
	})
	if err != nil {
		return fmt.Errorf("record the request counts in ConfigMap %s/%s: %w", l.Namespace, l.Name, err)
	}
	return nil
}

// prune keeps the newest sample of each mark and the newest keptSamples other ones (older
// samples of a mark among them, their mark cleared), oldest first.
func prune(samples []Sample) []Sample {
	slices.SortStableFunc(samples, func(a, b Sample) int { return a.Time.Compare(b.Time) })
	newestMarked := map[string]int{}
	for i, s := range samples {
		if s.Mark != "" {
			newestMarked[s.Mark] = i
		}
	}
	isMark := func(i int) bool { return samples[i].Mark != "" && newestMarked[samples[i].Mark] == i }
	others := 0
	for i := range samples {
		if !isMark(i) {
			others++
		}
	}
	var out []Sample
	for i, s := range samples {
		switch {
		case isMark(i):
			out = append(out, s)
		case others <= keptSamples:
			s.Mark = ""
			out = append(out, s)
		default:
			others-- // one of the oldest, beyond the cap
		}
	}
	return out
}
