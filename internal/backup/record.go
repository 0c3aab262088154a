package backup

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Record is what the cluster keeps of the last backup of a CRD: the flip-storage preflight
// warns when there is none.
type Record struct {
	Manifest
	// Dir is where the backup was written, on the machine that took it.
	Dir string `json:"dir"`
	// Host is that machine.
	Host string `json:"host,omitempty"`
}

// RecordName is the ConfigMap the last backup of a CRD is recorded in.
func RecordName(crdName string) string { return "widget-backup-" + crdName }

const recordKey = "backup.json"

// SaveRecord records a backup in namespace, replacing the record of the one before.
func SaveRecord(ctx context.Context, c client.Client, namespace string, r Record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: RecordName(r.CRD),
		Labels: map[string]string{"app.kubernetes.io/managed-by": "widgetctl", "app.kubernetes.io/part-of": "widget-operator"}},
		Data: map[string]string{recordKey: string(data)}}
	err = c.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		err = c.Update(ctx, cm)
	}
	if err != nil {
		return fmt.Errorf("record the backup in ConfigMap %s/%s: %w", namespace, cm.Name, err)
	}
	return nil
}

// LastRecord returns the record of the last backup of crdName in namespace; nil when none was
// recorded.
func LastRecord(ctx context.Context, c client.Reader, namespace, crdName string) (*Record, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: RecordName(crdName)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the backup record %s/%s: %w", namespace, RecordName(crdName), err)
	}
	r := &Record{}
	if err := json.Unmarshal([]byte(cm.Data[recordKey]), r); err != nil {
		return nil, fmt.Errorf("the backup record %s/%s is damaged (%w): take a new backup", namespace, cm.Name, err)
	}
	return r, nil
}
