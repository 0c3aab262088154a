// Package metalist walks every object of a resource a page at a time: through the metadata
// API (Each) for the commands that need only names, finalizers, owner references or
// managedFields of what may be many thousands of objects, or whole (EachObject) for those that
// compare or back up what they read.
//
// Paging is client-go's pager: pages of PageSize, and a LIST whose continue token expired
// (410 Gone, after etcd compaction) falls back to one full LIST instead of failing. Callers
// must therefore be idempotent per object, which every caller here is (a finalizer already
// removed, a managedFields entry already dropped, a count).
package metalist

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/pager"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PageSize is the LIST limit: 500 as kubectl's --chunk-size, small enough for a 2-core
// apiserver to answer quickly, large enough for few round trips.
const PageSize = 500

// Each calls fn for every object of res (all namespaces when res is not namespaced), page by
// page, and stops at the first error fn returns.
func Each(ctx context.Context, res metadata.ResourceInterface, fn func(*metav1.PartialObjectMetadata) error) error {
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return res.List(ctx, opts)
	})
	p.PageSize = PageSize
	return p.EachListItem(ctx, metav1.ListOptions{}, func(o runtime.Object) error {
		item, ok := o.(*metav1.PartialObjectMetadata)
		if !ok {
			return fmt.Errorf("metadata LIST returned a %T", o)
		}
		return fn(item)
	})
}

// EachObject calls fn for every object listed through apiVersion (listKind its list kind),
// whole, page by page with c, and stops at the first error fn returns or a failed LIST (a
// 410 Gone included: callers that compare what they read rerun rather than mix two
// snapshots).
func EachObject(ctx context.Context, c client.Reader, apiVersion, listKind string, fn func(*unstructured.Unstructured) error) error {
	_, err := EachObjectAt(ctx, c, apiVersion, listKind, "", fn)
	return err
}

// EachObjectAt is EachObject reading the collection as it was at resourceVersion (empty: now),
// and returns the resourceVersion it read at. Callers that compare what two versions of a
// CRD list pass the first LIST's resourceVersion to the second: objects written in between
// (under load, always) would otherwise show as a difference. Every page of a paginated LIST
// is read at its first page's resourceVersion.
func EachObjectAt(ctx context.Context, c client.Reader, apiVersion, listKind, resourceVersion string, fn func(*unstructured.Unstructured) error) (string, error) {
	snapshot := ""
	for cont := ""; ; {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(apiVersion)
		list.SetKind(listKind)
		opts := []client.ListOption{client.Limit(PageSize), client.Continue(cont)}
		if cont == "" && resourceVersion != "" {
			// The continue token carries the snapshot; only the first page names it.
			opts = append(opts, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact}})
		}
		if err := c.List(ctx, list, opts...); err != nil {
			return "", err
		}
		if snapshot == "" {
			snapshot = list.GetResourceVersion()
		}
		for i := range list.Items {
			if err := fn(&list.Items[i]); err != nil {
				return "", err
			}
		}
		if cont = list.GetContinue(); cont == "" {
			return snapshot, nil
		}
	}
}
