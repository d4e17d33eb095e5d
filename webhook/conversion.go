package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/ctrlkit/ctrlkit/object"
)

// ConvertPath is where the server answers the API server's
// ConversionReviews, for every kind with a registered conversion.
const ConvertPath = "/convert"

// Convertible is a spoke version of a custom resource whose hub (storage)
// version is H: it converts itself to the hub and back. ConvertTo fills
// hub from the receiver; ConvertFrom fills the receiver from hub. Both
// carry the object's metadata across (the API server checks that name,
// namespace, UID, labels and annotations are unchanged).
type Convertible[H object.Object] interface {
	object.Object
	ConvertTo(hub H) error
	ConvertFrom(hub H) error
}

// conversion converts the versions of one kind through its hub.
type conversion struct {
	hub     schema.GroupVersionKind
	toHub   map[string]func(raw []byte) (runtime.Object, error)         // by source version
	fromHub map[string]func(hub runtime.Object) (runtime.Object, error) // by target version
}

// AddConversion serves the conversion of H's kind between H (the hub) and
// each spoke, at ConvertPath: any version to any other, through H. Each
// spoke is an example value of its type (e.g. &v1.Website{}), of the same
// kind as H in another version of its group.
func AddConversion[H object.Object](s *Server, spokes ...Convertible[H]) error {
	hubGVK, err := kindOfType[H](s)
	if err != nil {
		return err
	}
	c := &conversion{hub: hubGVK, toHub: map[string]func([]byte) (runtime.Object, error){},
		fromHub: map[string]func(runtime.Object) (runtime.Object, error){}}
	c.toHub[hubGVK.Version] = func(raw []byte) (runtime.Object, error) { return decodeAs(reflect.TypeFor[H](), raw) }
	c.fromHub[hubGVK.Version] = func(hub runtime.Object) (runtime.Object, error) { return hub, nil }
	for _, sp := range spokes {
		if err := addSpoke(s, c, sp); err != nil {
			return err
		}
	}
	gk := hubGVK.GroupKind()
	s.mu.Lock()
	_, dup := s.conv[gk]
	first := len(s.conv) == 0
	if !dup {
		s.conv[gk] = c
	}
	s.mu.Unlock()
	if dup {
		return fmt.Errorf("webhook: a conversion of %s is registered already", gk)
	}
	if first {
		return s.register(ConvertPath, nil, s.serveConversion)
	}
	return nil
}

// addSpoke adds the conversions between sp's version and the hub's.
func addSpoke[H object.Object](s *Server, c *conversion, sp Convertible[H]) error {
	ro, ok := any(sp).(runtime.Object)
	if !ok {
		return fmt.Errorf("webhook: spoke %T is not a runtime.Object", sp)
	}
	gvk, err := s.kindOf(ro)
	if err != nil {
		return err
	}
	if gvk.GroupKind() != c.hub.GroupKind() || gvk.Version == c.hub.Version {
		return fmt.Errorf("webhook: spoke %s is not another version of the hub %s", gvk, c.hub)
	}
	t := reflect.TypeOf(sp)
	c.toHub[gvk.Version] = func(raw []byte) (runtime.Object, error) {
		spoke, err := decodeAs(t, raw)
		if err != nil {
			return nil, err
		}
		hub, err := newOf[H]()
		if err != nil {
			return nil, err
		}
		if err := spoke.(Convertible[H]).ConvertTo(hub); err != nil {
			return nil, err
		}
		return any(hub).(runtime.Object), nil
	}
	c.fromHub[gvk.Version] = func(hub runtime.Object) (runtime.Object, error) {
		out := reflect.New(t.Elem()).Interface()
		if err := out.(Convertible[H]).ConvertFrom(hub.(H)); err != nil {
			return nil, err
		}
		return out.(runtime.Object), nil
	}
	return nil
}

// decodeAs decodes raw into a new value of the pointer type t.
func decodeAs(t reflect.Type, raw []byte) (runtime.Object, error) {
	v := reflect.New(t.Elem()).Interface()
	if err := utiljson.Unmarshal(raw, v); err != nil {
		return nil, err
	}
	ro, ok := v.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("%v is not a runtime.Object", t)
	}
	return ro, nil
}

// conversionReview is the API server's ConversionReview
// (apiextensions.k8s.io/v1), the fields a webhook reads and writes.
type conversionReview struct {
	metav1.TypeMeta `json:",inline"`
	Request         *conversionRequest  `json:"request,omitempty"`
	Response        *conversionResponse `json:"response,omitempty"`
}

type conversionRequest struct {
	UID               types.UID              `json:"uid"`
	DesiredAPIVersion string                 `json:"desiredAPIVersion"`
	Objects           []runtime.RawExtension `json:"objects"`
}

type conversionResponse struct {
	UID              types.UID              `json:"uid"`
	ConvertedObjects []runtime.RawExtension `json:"convertedObjects"`
	Result           metav1.Status          `json:"result"`
}

// serveConversion answers a ConversionReview: every object converted, or a
// failure naming the first that could not be.
func (s *Server) serveConversion(w http.ResponseWriter, r *http.Request, body []byte) {
	review, err := readConversionReview(body)
	if err != nil {
		writeBad(w, err)
		return
	}
	resp := &conversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
	for i, raw := range review.Request.Objects {
		out, err := s.convert(raw.Raw, review.Request.DesiredAPIVersion)
		if err != nil {
			resp.ConvertedObjects = nil
			resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: fmt.Sprintf("object %d: %v", i, err)}
			markRejected(r)
			break
		}
		resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: out})
	}
	writeJSON(w, http.StatusOK, conversionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "ConversionReview"}, Response: resp})
}

// readConversionReview decodes an apiextensions.k8s.io/v1 ConversionReview.
func readConversionReview(body []byte) (*conversionReview, error) {
	var review conversionReview
	if err := utiljson.Unmarshal(body, &review); err != nil {
		return nil, &badRequest{http.StatusBadRequest, "webhook: malformed ConversionReview: " + err.Error()}
	}
	if err := checkType(review.TypeMeta, "apiextensions.k8s.io/v1", "ConversionReview",
		"conversionReviewVersions: [v1] in the CRD's spec.conversion.webhook"); err != nil {
		return nil, err
	}
	if review.Request == nil {
		return nil, &badRequest{http.StatusBadRequest, "webhook: the ConversionReview has no request"}
	}
	return &review, nil
}

// convert converts one object to the desired API version.
func (s *Server) convert(raw []byte, desired string) ([]byte, error) {
	var tm metav1.TypeMeta
	if err := utiljson.Unmarshal(raw, &tm); err != nil {
		return nil, fmt.Errorf("not an object: %w", err)
	}
	src := tm.GroupVersionKind()
	dst, err := schema.ParseGroupVersion(desired)
	if err != nil {
		return nil, fmt.Errorf("desired version %q: %w", desired, err)
	}
	s.mu.Lock()
	c := s.conv[src.GroupKind()]
	s.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("no conversion is registered for %s", src.GroupKind())
	}
	if dst.Group != src.Group {
		return nil, fmt.Errorf("cannot convert %s to another group (%s)", src, desired)
	}
	toHub, ok := c.toHub[src.Version]
	if !ok {
		return nil, fmt.Errorf("version %s of %s is not registered (hub %s)", src.Version, src.Kind, c.hub.Version)
	}
	fromHub, ok := c.fromHub[dst.Version]
	if !ok {
		return nil, fmt.Errorf("version %s of %s is not registered (hub %s)", dst.Version, src.Kind, c.hub.Version)
	}
	hub, err := toHub(raw)
	if err != nil {
		return nil, fmt.Errorf("%s %s to %s: %w", src.Kind, src.Version, c.hub.Version, err)
	}
	out, err := fromHub(hub)
	if err != nil {
		return nil, fmt.Errorf("%s %s to %s: %w", src.Kind, c.hub.Version, dst.Version, err)
	}
	out.GetObjectKind().SetGroupVersionKind(dst.WithKind(src.Kind))
	return json.Marshal(out)
}

// RoundTrip converts spoke to the hub and back, and returns an error
// showing what differs when the result is not equal to spoke: the test of
// a conversion that loses a field. Call it with objects that set every
// field (a fuzzer's, or a filled-in example).
func RoundTrip[H object.Object, S Convertible[H]](spoke S) error {
	hub, err := newOf[H]()
	if err != nil {
		return err
	}
	back, err := newOf[S]()
	if err != nil {
		return err
	}
	if err := spoke.ConvertTo(hub); err != nil {
		return fmt.Errorf("webhook: ConvertTo: %w", err)
	}
	if err := back.ConvertFrom(hub); err != nil {
		return fmt.Errorf("webhook: ConvertFrom: %w", err)
	}
	if !apiequality.Semantic.DeepEqual(withoutType(spoke), withoutType(back)) {
		a, _ := json.Marshal(spoke)
		b, _ := json.Marshal(back)
		return errors.New("webhook: the round trip through the hub changed the object:\n before: " + string(a) + "\n after:  " + string(b))
	}
	return nil
}

// withoutType returns a copy of obj without its apiVersion and kind, which
// a conversion sets or not as it likes.
func withoutType(obj any) any {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return obj
	}
	ro = ro.DeepCopyObject()
	ro.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return ro
}
