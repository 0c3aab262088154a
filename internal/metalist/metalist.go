// Package metalist walks every object of a resource through the metadata API, a page at a
// time, for the commands that need only names, finalizers, owner references or
// managedFields of what may be many thousands of objects.
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
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/pager"
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
