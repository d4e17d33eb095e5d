package reflector

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ctrlkit/ctrlkit/object"
)

// ListerWatcher lists and watches one resource: what the Reflector consumes.
// T is the object type the list items and watch events carry, e.g.
// *corev1.Pod. Package listwatch adapts client-go's clients to it.
type ListerWatcher[T object.Object] interface {
	// List returns one page of objects. It blocks on the API server.
	List(ctx context.Context, opts metav1.ListOptions) (List[T], error)
	// Watch starts a watch. Events carry T, except Error events (a
	// *metav1.Status) and objects the server sent that are not a T; the
	// Reflector skips those with a log line and a metric.
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// List is one page of a list.
type List[T object.Object] struct {
	Items           []T
	ResourceVersion string // the list's resource version
	Continue        string // token for the next page; "" on the last page
	// RemainingItemCount is the number of objects after this page, when
	// the server says (ListMeta.RemainingItemCount); nil otherwise.
	RemainingItemCount *int64
	// Skipped counts items that were left out, not being a T (or not
	// decoding, with SkipReason "undecodable"); Skip describes the first
	// of them. SkipReason labels them in the skipped-objects metric.
	// Default: "wrong type".
	Skipped    int
	Skip       string
	SkipReason string
}

// Undecodable is a watch event's object that a ListerWatcher could not
// decode (the event's Object implements it): the Reflector skips the event
// with a log line and the metric's "undecodable" reason, and goes on.
type Undecodable interface {
	Undecodable() error
}
