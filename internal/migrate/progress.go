package migrate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The progress object.
//
// Each CRD has one well-known ConfigMap, ProgressObjectName(crd), in a namespace chosen by
// the caller (widgetctl's --progress-namespace; the chart passes the release namespace). A
// ConfigMap rather than an annotation on the CRD, because:
//   - the manager that exports widget_migration_* from it needs only namespaced read access
//     to ConfigMaps in its own namespace, not to CRDs;
//   - checkpointing every page would otherwise write the CRD hundreds of times, waking every
//     CRD watcher (discovery, garbage collector, Helm/GitOps diffs) and moving the CRD's
//     resourceVersion under the trim's optimistic lock and under kube-controller-manager's
//     own storage-version-migrator, which locks on it too;
//   - the ConfigMap's resourceVersion is our own optimistic lock between two migrators.
//
// All values are strings (ConfigMap data); counters are decimal, times RFC 3339. The keys
// are a contract with the metrics collector (NewProgressCollector), the runbooks and the
// stage engine.
const (
	// ProgressLabel marks progress ConfigMaps ("true") so the collector can list them.
	ProgressLabel = "widgetry.io/migration-progress"

	KeyCRD                     = "crd"                     // CRD name, e.g. widgets.widgetry.io
	KeyGroup                   = "group"                   // API group of the CRD
	KeyResource                = "resource"                // plural resource name
	KeyStorageVersion          = "storageVersion"          // the version objects are re-encoded in
	KeyCRDGeneration           = "crdGeneration"           // CRD metadata.generation when the run started
	KeyCRDUID                  = "crdUID"                  // CRD metadata.uid when the run started
	KeySealedBy                = "sealedBy"                // set by the chart's migrate hook only (Options.Seal); the apiserver refuses it from anyone else
	KeyStoredVersionsAtStart   = "storedVersionsAtStart"   // comma-separated status.storedVersions at start
	KeyBackend                 = "backend"                 // client or in-tree
	KeyPhase                   = "phase"                   // Running, Succeeded or Failed
	KeyHolder                  = "holder"                  // who runs it (host/pid), for humans
	KeyStartTime               = "startTime"               // start of the run (kept across resumes)
	KeyLastProgressTime        = "lastProgressTime"        // last time objects were completed
	KeyCompletionTime          = "completionTime"          // end of the run, Succeeded or Failed
	KeyContinue                = "continue"                // LIST continue token of the next page to do
	KeyLastKey                 = "lastKey"                 // namespace/name of the last object checkpointed
	KeyMigrated                = "migrated"                // objects re-encoded (or already in the storage encoding)
	KeyUnchanged               = "unchanged"               // of those, objects the apiserver did not need to rewrite
	KeyConflict                = "conflict"                // objects someone else wrote meanwhile (re-encoded by that write)
	KeyNotFound                = "notFound"                // objects deleted meanwhile
	KeyError                   = "error"                   // objects that could not be written
	KeyTotal                   = "total"                   // estimated number of objects
	KeyAttempts                = "attempts"                // runs that worked on this migration (1 + resumes)
	KeyMessage                 = "message"                 // the last error or refusal, for humans
	KeyStorageVersionMigration = "storageVersionMigration" // in-tree backend: the StorageVersionMigration's name
)

// Phases of the progress object.
const (
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
)

// progressPrefix starts every progress object's name.
const progressPrefix = "widget-migration-"

// ProgressObjectName is the name of the progress ConfigMap of a CRD:
// "widget-migration-<crd name>", or, for CRD names too long for that, a truncated name with
// a hash suffix so that it stays unique and a valid object name.
func ProgressObjectName(crdName string) string {
	name := progressPrefix + crdName
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(crdName))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	return strings.TrimRight(name[:validation.DNS1123SubdomainMaxLength-len(suffix)], ".-") + suffix
}

// Counts are the per-object outcomes of a migration.
type Counts struct {
	// Migrated objects were written back in the storage version (Unchanged of them needed no
	// write: the apiserver found them already in the storage encoding).
	Migrated, Unchanged int64
	// Conflict objects were written by someone else between our LIST and our write, which
	// re-encoded them; NotFound objects were deleted meanwhile. Neither is retried.
	Conflict, NotFound int64
	// Error objects could not be written; a migration with errors does not trim.
	Error int64
}

// Done is the number of objects with any outcome.
func (c Counts) Done() int64 { return c.Migrated + c.Conflict + c.NotFound + c.Error }

func (c *Counts) add(o Counts) {
	c.Migrated += o.Migrated
	c.Unchanged += o.Unchanged
	c.Conflict += o.Conflict
	c.NotFound += o.NotFound
	c.Error += o.Error
}

// Progress is the decoded progress object.
type Progress struct {
	CRD, Group, Resource string
	StorageVersion       string
	CRDGeneration        int64
	CRDUID               string
	// SealedBy is set only in checkpoints the chart's migrate hook wrote (Options.Seal): the
	// chart's gate-state guard refuses the key from any other writer, so a checkpoint without
	// it (forged, edited by hand, or written by a run by hand) is never resumed.
	SealedBy                string
	StoredVersionsAtStart   []string
	Backend                 string
	Phase                   string
	Holder                  string
	StartTime               time.Time
	LastProgressTime        time.Time
	CompletionTime          time.Time
	Continue                string
	LastKey                 string
	Counts                  Counts
	Total                   int64
	Attempts                int64
	Message                 string
	StorageVersionMigration string
}

// DecodeProgress reads a progress ConfigMap. Missing or malformed fields read as zero: the
// object is also edited by hand in emergencies, and a scrape must not fail because of it.
func DecodeProgress(cm *corev1.ConfigMap) Progress {
	d := cm.Data
	num := func(k string) int64 { n, _ := strconv.ParseInt(d[k], 10, 64); return n }
	tm := func(k string) time.Time { t, _ := time.Parse(time.RFC3339Nano, d[k]); return t }
	var stored []string
	if s := d[KeyStoredVersionsAtStart]; s != "" {
		stored = strings.Split(s, ",")
	}
	return Progress{
		CRD: d[KeyCRD], Group: d[KeyGroup], Resource: d[KeyResource],
		StorageVersion:        d[KeyStorageVersion],
		CRDGeneration:         num(KeyCRDGeneration),
		CRDUID:                d[KeyCRDUID],
		SealedBy:              d[KeySealedBy],
		StoredVersionsAtStart: stored,
		Backend:               d[KeyBackend],
		Phase:                 d[KeyPhase],
		Holder:                d[KeyHolder],
		StartTime:             tm(KeyStartTime),
		LastProgressTime:      tm(KeyLastProgressTime),
		CompletionTime:        tm(KeyCompletionTime),
		Continue:              d[KeyContinue],
		LastKey:               d[KeyLastKey],
		Counts: Counts{Migrated: num(KeyMigrated), Unchanged: num(KeyUnchanged), Conflict: num(KeyConflict),
			NotFound: num(KeyNotFound), Error: num(KeyError)},
		Total:                   num(KeyTotal),
		Attempts:                num(KeyAttempts),
		Message:                 d[KeyMessage],
		StorageVersionMigration: d[KeyStorageVersionMigration],
	}
}

// encode writes p into data.
func (p *Progress) encode() map[string]string {
	itoa := func(n int64) string { return strconv.FormatInt(n, 10) }
	tm := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	d := map[string]string{
		KeyCRD: p.CRD, KeyGroup: p.Group, KeyResource: p.Resource,
		KeyStorageVersion:          p.StorageVersion,
		KeyCRDGeneration:           itoa(p.CRDGeneration),
		KeyCRDUID:                  p.CRDUID,
		KeySealedBy:                p.SealedBy,
		KeyStoredVersionsAtStart:   strings.Join(p.StoredVersionsAtStart, ","),
		KeyBackend:                 p.Backend,
		KeyPhase:                   p.Phase,
		KeyHolder:                  p.Holder,
		KeyStartTime:               tm(p.StartTime),
		KeyLastProgressTime:        tm(p.LastProgressTime),
		KeyCompletionTime:          tm(p.CompletionTime),
		KeyContinue:                p.Continue,
		KeyLastKey:                 p.LastKey,
		KeyMigrated:                itoa(p.Counts.Migrated),
		KeyUnchanged:               itoa(p.Counts.Unchanged),
		KeyConflict:                itoa(p.Counts.Conflict),
		KeyNotFound:                itoa(p.Counts.NotFound),
		KeyError:                   itoa(p.Counts.Error),
		KeyTotal:                   itoa(p.Total),
		KeyAttempts:                itoa(p.Attempts),
		KeyMessage:                 p.Message,
		KeyStorageVersionMigration: p.StorageVersionMigration,
	}
	for k, v := range d {
		if v == "" {
			delete(d, k)
		}
	}
	return d
}

// progressStore reads and writes one progress ConfigMap with optimistic locking: every write
// carries the resourceVersion of our last read or write, so a second migrator working on the
// same CRD is detected at its next checkpoint instead of silently interleaving.
type progressStore struct {
	c         client.Client
	namespace string
	name      string
	cm        *corev1.ConfigMap // last version read or written; nil if none exists
}

func newProgressStore(c client.Client, namespace, crdName string) *progressStore {
	return &progressStore{c: c, namespace: namespace, name: ProgressObjectName(crdName)}
}

func (s *progressStore) ref() string { return s.namespace + "/" + s.name }

// load reads the progress object; ok is false when there is none.
func (s *progressStore) load(ctx context.Context) (p Progress, ok bool, err error) {
	cm := &corev1.ConfigMap{}
	err = s.c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.name}, cm)
	if apierrors.IsNotFound(err) {
		s.cm = nil
		return Progress{}, false, nil
	}
	if err != nil {
		return Progress{}, false, fmt.Errorf("read the migration progress ConfigMap %s: %w", s.ref(), err)
	}
	s.cm = cm
	return DecodeProgress(cm), true, nil
}

// save writes p, creating the object if needed. A Conflict means someone else wrote it since
// our last read: most likely another migration of the same CRD.
func (s *progressStore) save(ctx context.Context, p *Progress) error {
	if s.cm == nil {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.name, Labels: map[string]string{ProgressLabel: "true"}},
			Data:       p.encode(),
		}
		if err := s.c.Create(ctx, cm); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create the migration progress ConfigMap %s: it was created meanwhile, so another migration of CRD %s is probably running; let it finish or stop it, then rerun: %w", s.ref(), p.CRD, err)
			}
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("create the migration progress ConfigMap %s: namespace %q does not exist; create it or pass another --progress-namespace: %w", s.ref(), s.namespace, err)
			}
			return fmt.Errorf("create the migration progress ConfigMap %s: %w", s.ref(), err)
		}
		s.cm = cm
		return nil
	}
	cm := s.cm.DeepCopy()
	cm.Data = p.encode()
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[ProgressLabel] = "true"
	if err := s.c.Update(ctx, cm); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("write the migration progress ConfigMap %s: someone else changed it, so another migration of CRD %s is probably running (see its holder field); let it finish or stop it, then rerun: %w", s.ref(), p.CRD, err)
		}
		return fmt.Errorf("write the migration progress ConfigMap %s: %w", s.ref(), err)
	}
	s.cm = cm
	return nil
}
