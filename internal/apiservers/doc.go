// Package apiservers finds every kube-apiserver instance of a cluster and asks each one
// directly, past the load balancer in front of them: the storage-version wait before a
// migration (internal/storageversion) and the count of requests each instance served for a
// version (internal/apitraffic) both need every instance's own answer.
package apiservers
