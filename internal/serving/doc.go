// Package serving holds what every listener of the manager shares, so that none of them keeps
// a library's defaults: the webhook server, the metrics endpoint, the health probes and pprof
// each get header, read, write and idle limits (Limits), a cap on connections in total and per
// source address (Listen), and, where callers authenticate, a per-source limit on failed
// authentications (AuthFailureLimiter). controller-runtime's own metrics, probe and pprof
// servers allow 1 MiB of headers for 32 s with no read timeout and no connection cap, in the
// same container as the webhooks: a hundred trickling clients cost a hundred megabytes.
package serving
