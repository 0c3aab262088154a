package releasestatus

import (
	"time"

	"github.com/widgetry/widget-operator/internal/upgrade"
)

// Report is widgetctl status' result.
type Report struct {
	Namespace string   `json:"namespace"`
	Release   *Release `json:"release,omitempty"`
	// ReleaseError says why the release could not be read.
	ReleaseError string       `json:"releaseError,omitempty"`
	Stage        StageReport  `json:"stage"`
	Certificates []Cert       `json:"certificates"`
	CABundles    []Bundle     `json:"caBundles"`
	Replicas     []Replica    `json:"replicas"`
	Leader       *Leader      `json:"leader,omitempty"`
	Migration    *Migration   `json:"migration,omitempty"`
	Paused       *Pause       `json:"paused,omitempty"`
	Conversion   []Conversion `json:"conversion"`
	// Causes name what is wrong, most urgent first, each with the runbook page to open.
	Causes []Cause `json:"causes"`
}

// StageReport sets the stage Helm rendered beside the stage the CRD is at.
type StageReport struct {
	// Chart is the release's apiUpgrade.stage value.
	Chart string `json:"chart,omitempty"`
	// Cluster is the stage derived from the live CRD.
	Cluster     string               `json:"cluster"`
	Observation *upgrade.Observation `json:"observation,omitempty"`
	// Drift explains a difference between the two, empty when there is none.
	Drift string `json:"drift,omitempty"`
}

// Cert is one cert-manager Certificate of the release.
type Cert struct {
	Name         string     `json:"name"`
	SecretName   string     `json:"secretName"`
	DNSNames     []string   `json:"dnsNames,omitempty"`
	Issuer       string     `json:"issuer"`
	Ready        string     `json:"ready"`
	Reason       string     `json:"reason,omitempty"`
	Message      string     `json:"message,omitempty"`
	NotAfter     *time.Time `json:"notAfter,omitempty"`
	RenewalTime  *time.Time `json:"renewalTime,omitempty"`
	Serving      bool       `json:"serving"`
	RenewOverdue bool       `json:"renewalOverdue"`
}

// Bundle is one caBundle the apiserver verifies the webhooks with.
type Bundle struct {
	Source string   `json:"source"`
	CAs    []string `json:"cas"`
}

// Replica is one pod of the webhook or the controller plane (or of the single-Deployment layout
// before them, which was both).
type Replica struct {
	Pod string `json:"pod"`
	// Plane is the pod's app.kubernetes.io/component: webhook, controller, or manager (the
	// single-Deployment layout).
	Plane    string           `json:"plane"`
	Node     string           `json:"node,omitempty"`
	Phase    string           `json:"phase"`
	Ready    bool             `json:"ready"`
	Restarts map[string]int32 `json:"restarts"`
	Leader   bool             `json:"leader"`
	// Serving describes the certificate the replica presents; ServingError why it is unknown.
	Serving      *ServedCert `json:"serving,omitempty"`
	ServingError string      `json:"servingError,omitempty"`
}

// ServedCert is the leaf a replica presents and what each caBundle says of it.
type ServedCert struct {
	Serial   string    `json:"serial"`
	NotAfter time.Time `json:"notAfter"`
	Issuer   string    `json:"issuer"`
	// Untrusted lists the caBundles it does not verify against, with why.
	Untrusted []string `json:"untrusted,omitempty"`
	// OlderThanCertificate is set when cert-manager has issued a later certificate than the
	// one served (kubelet has not refreshed the volume, or the reload gate holds it).
	OlderThanCertificate bool `json:"olderThanCertificate,omitempty"`
	// HeldRenewal is the serial of a renewal the reload gate holds back.
	HeldRenewal string `json:"heldRenewal,omitempty"`
}

// Leader is the controller's leader election Lease.
type Leader struct {
	Holder    string     `json:"holder"`
	RenewTime *time.Time `json:"renewTime,omitempty"`
	Expired   bool       `json:"expired"`
}

// Migration is the storage migration's progress ConfigMap.
type Migration struct {
	Phase            string     `json:"phase"`
	StorageVersion   string     `json:"storageVersion"`
	Done             int64      `json:"done"`
	Total            int64      `json:"total"`
	Errors           int64      `json:"errors"`
	Message          string     `json:"message,omitempty"`
	LastProgressTime *time.Time `json:"lastProgressTime,omitempty"`
}

// Pause is the pause marker.
type Pause struct {
	Since time.Time `json:"since"`
}

// Conversion is one check of the conversion path through the apiserver.
type Conversion struct {
	Check string `json:"check"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// Cause is one thing wrong and where to start.
type Cause struct {
	Summary string `json:"summary"`
	Runbook string `json:"runbook"`
}

// Serves tells whether the replica serves the webhooks (the webhook plane, or a pod of the
// single-Deployment layout).
func (r Replica) Serves() bool { return r.Plane != controllerComp }

// Leads tells whether the replica may run the controller (the controller plane, or a pod of the
// single-Deployment layout).
func (r Replica) Leads() bool { return r.Plane != webhookComp }
