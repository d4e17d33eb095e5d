package shard

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// ServerSelector returns s in the API server's shardSelector syntax (see
// String). With Contains, it makes a Selector a listwatch.Shard.
func (s Selector) ServerSelector() string { return s.String() }

// Contains reports whether obj is in s (see Matches).
func (s Selector) Contains(obj metav1.Object) bool { return s.Matches(obj) }

// ByController selects the objects whose controller (the owner reference
// with controller: true) is in Selector, by the controller's UID: objects
// owned by primaries of a shard follow their owner. The API server cannot
// apply that, so ServerSelector is empty and the client filters alone;
// objects without a controller are left out. It holds a pointer, so making
// one per watch event (listwatch.Options.Shard is called for each) does not
// allocate.
type ByController struct{ Selector *Selector }

// ServerSelector returns "": the server cannot select by an owner's UID.
func (b ByController) ServerSelector() string { return "" }

// Contains reports whether obj's controller is in b.Selector.
func (b ByController) Contains(obj metav1.Object) bool {
	ref := metav1.GetControllerOfNoCopy(obj)
	return ref != nil && b.Selector.MatchesValue(string(ref.UID))
}
