// Package webhook holds the HTTP handlers the manager serves on its one HTTPS webhook server:
// CRD conversion (/convert) and, later, admission (defaulting and validation).
package webhook
