package backup

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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

// DrillRecord is what the cluster keeps of the last restore drill of the recorded backup: the
// preflights of unserve and remove read it.
type DrillRecord struct {
	// BackupTime is the drilled backup's manifest time: a drill counts for that backup only.
	BackupTime time.Time `json:"backupTime"`
	Dir        string    `json:"dir,omitempty"`
	Time       time.Time `json:"time"`
	Objects    int       `json:"objects"`
	Failed     int       `json:"failed"`
	OK         bool      `json:"ok"`
}

const drillKey = "drill.json"

// SaveDrill records a drill beside the record of the backup it drilled (a new backup's
// SaveRecord drops it: that backup is not drilled yet).
func SaveDrill(ctx context.Context, c client.Client, namespace, crdName string, d DrillRecord) error {
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: RecordName(crdName)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("no backup of %s is recorded in namespace %s: the drill's backup was taken without --records-namespace %s, or in another cluster; record it by taking a backup here", crdName, namespace, namespace)
		}
		return fmt.Errorf("read the backup record %s/%s: %w", namespace, RecordName(crdName), err)
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[drillKey] = string(data)
	if err := c.Update(ctx, cm); err != nil {
		return fmt.Errorf("record the drill in ConfigMap %s/%s: %w", namespace, cm.Name, err)
	}
	return nil
}

// LastDrill returns the record of the last drill in namespace; nil when none was recorded.
func LastDrill(ctx context.Context, c client.Reader, namespace, crdName string) (*DrillRecord, error) {
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: RecordName(crdName)}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the backup record %s/%s: %w", namespace, RecordName(crdName), err)
	}
	raw, ok := cm.Data[drillKey]
	if !ok {
		return nil, nil
	}
	d := &DrillRecord{}
	if err := json.Unmarshal([]byte(raw), d); err != nil {
		return nil, fmt.Errorf("the drill record in %s/%s is damaged (%w): drill again", namespace, cm.Name, err)
	}
	return d, nil
}
