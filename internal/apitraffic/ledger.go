package apitraffic

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LedgerName is the ConfigMap the samples of a CRD are kept in, in the operator's namespace.
func LedgerName(crdName string) string { return "widget-api-traffic-" + crdName }

// ledgerKey is the ConfigMap key holding the samples as JSON, ownKey the records of our own
// requests (OwnRecord).
const (
	ledgerKey = "samples.json"
	ownKey    = "own-requests.json"
)

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
	cm, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return decode(cm, l)
}

// get reads the ledger's ConfigMap: nil when it does not exist.
func (l Ledger) get(ctx context.Context) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	if err := l.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the request counts recorded in ConfigMap %s/%s: %w", l.Namespace, l.Name, err)
	}
	return cm, nil
}

func decode(cm *corev1.ConfigMap, l Ledger) ([]Sample, error) {
	return decodeKey[Sample](cm, l, ledgerKey, "delete it to start counting afresh")
}

// decodeKey decodes the JSON list under key; none when cm is nil or the key is empty. fix says
// what to do with a key this tool did not write.
func decodeKey[T any](cm *corev1.ConfigMap, l Ledger, key, fix string) ([]T, error) {
	var out []T
	if cm == nil {
		return nil, nil
	}
	if data := cm.Data[key]; data != "" {
		if err := json.Unmarshal([]byte(data), &out); err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s key %s is not what this tool writes (%w): %s", l.Namespace, l.Name, key, err, fix)
		}
	}
	return out, nil
}

// Append adds s, keeping the newest sample of each mark and the newest keptSamples others (an
// older sample of a mark stays as an ordinary one: it is still a baseline for later checks).
func (l Ledger) Append(ctx context.Context, s Sample) error {
	err := l.update(ctx, true, func(cm *corev1.ConfigMap) error {
		samples, err := decode(cm, l)
		if err != nil {
			return err
		}
		data, err := json.Marshal(prune(append(samples, s)))
		if err != nil {
			return err
		}
		cm.Data[ledgerKey] = string(data)
		return nil
	})
	if err != nil {
		return fmt.Errorf("record the request counts in ConfigMap %s/%s: %w", l.Namespace, l.Name, err)
	}
	return nil
}

// LoadOwn returns the records of our own requests; none when the ConfigMap does not exist.
func (l Ledger) LoadOwn(ctx context.Context) ([]OwnRecord, error) {
	cm, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return decodeOwn(cm, l)
}

func decodeOwn(cm *corev1.ConfigMap, l Ledger) ([]OwnRecord, error) {
	return decodeKey[OwnRecord](cm, l, ownKey, "delete the key (our own requests then count against the gate until the window passes)")
}

// AppendOwn adds records of our own requests to an existing ledger. Without one, no sample was
// taken yet (the storage flip's preflight takes the first), so no window can hold them: they
// are dropped.
func (l Ledger) AppendOwn(ctx context.Context, records []OwnRecord) error {
	if len(records) == 0 {
		return nil
	}
	err := l.update(ctx, false, func(cm *corev1.ConfigMap) error {
		if cm == nil {
			return nil
		}
		samples, err := decode(cm, l)
		if err != nil {
			return err
		}
		own, err := decodeOwn(cm, l)
		if err != nil {
			return err
		}
		data, err := json.Marshal(pruneOwn(append(own, records...), samples))
		if err != nil {
			return err
		}
		cm.Data[ownKey] = string(data)
		return nil
	})
	if err != nil {
		return fmt.Errorf("record our own requests in ConfigMap %s/%s: %w", l.Namespace, l.Name, err)
	}
	return nil
}

// update applies change to the ledger's ConfigMap, retrying on conflicts; with create, a
// missing ConfigMap is created, else change is called with nil and nothing is written.
func (l Ledger) update(ctx context.Context, create bool, change func(*corev1.ConfigMap) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm := &corev1.ConfigMap{}
		err := l.Client.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Name}, cm)
		missing := apierrors.IsNotFound(err)
		switch {
		case err != nil && !missing:
			return err
		case missing && !create:
			return change(nil)
		case missing:
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "widgetctl", "app.kubernetes.io/part-of": "widget-operator"}}}
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if err := change(cm); err != nil {
			return err
		}
		if missing {
			return l.Client.Create(ctx, cm)
		}
		return l.Client.Update(ctx, cm)
	})
}

// keptOwn bounds the records of our own requests kept (the newest).
const keptOwn = 512

// pruneOwn drops the records no window can hold any more (ended before the oldest sample) and
// keeps the newest keptOwn: a record dropped only counts against us.
func pruneOwn(own []OwnRecord, samples []Sample) []OwnRecord {
	var oldest time.Time
	for _, s := range samples {
		if oldest.IsZero() || s.Time.Before(oldest) {
			oldest = s.Time
		}
	}
	own = slices.DeleteFunc(own, func(r OwnRecord) bool { return r.To.Before(oldest) })
	slices.SortStableFunc(own, func(a, b OwnRecord) int { return a.To.Compare(b.To) })
	return own[max(0, len(own)-keptOwn):]
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
