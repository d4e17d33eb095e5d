package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/ctrlkit/ctrlkit/object"
)

// Warnings are shown to the client that sent the request (kubectl prints
// them), whether or not it is allowed.
type Warnings []string

// Validator validates one type's creates, updates and deletes. A nil
// function allows every request of its operation. A returned error denies
// the request: a field.ErrorList's aggregate (errs.ToAggregate()) or a
// *field.Error is answered as an Invalid status naming each field, an
// API status error (apierrors.NewForbidden, ...) as itself, any other
// error as Forbidden with its message. The objects are decoded for this
// request alone; the functions may keep them.
type Validator[T object.Object] struct {
	Create func(ctx context.Context, obj T) (Warnings, error)
	Update func(ctx context.Context, old, obj T) (Warnings, error)
	Delete func(ctx context.Context, obj T) (Warnings, error)
}

// Defaulter sets the defaults of one type's objects on create and update:
// it changes obj in place. The server answers with the JSON patch from
// the object as decoded to the object as changed (both marshalled from
// the type), applied to the object as sent: fields the type does not know
// (a newer server's) are left as sent, inside list elements too, unless
// the defaulter inserts or reorders a list's elements (matched by their
// "name"), which replaces that list whole. An error denies the request as
// a Validator's does.
type Defaulter[T object.Object] func(ctx context.Context, obj T) error

// RequestFrom returns the admission request a Validator or Defaulter is
// called for: who sent it, whether it is a dry run, the subresource.
func RequestFrom(ctx context.Context) (*admissionv1.AdmissionRequest, bool) {
	r, ok := ctx.Value(requestKey{}).(*admissionv1.AdmissionRequest)
	return r, ok
}

type requestKey struct{}

// Option adjusts the entry of one webhook in the webhook configurations
// (Server.Configurations, the manager's manifests): which requests the
// API server sends it.
type Option func(*hookConfig) error

// hookConfig is what the Options of one webhook set.
type hookConfig struct {
	objectSelector *metav1.LabelSelector
}

// ObjectSelector sends the webhook only the requests for objects whose
// labels sel selects (its objectSelector): a webhook on a built-in kind
// that only some objects concern (ConfigMaps labelled by the operator)
// then neither slows nor, when it is down and its failure policy is Fail,
// blocks the writes of every other one. On an update the API server
// matches the old object's labels as well as the new one's, so removing
// the label does not escape the review. An invalid selector is
// AddValidator's or AddDefaulter's error.
func ObjectSelector(sel metav1.LabelSelector) Option {
	return func(c *hookConfig) error {
		if _, err := metav1.LabelSelectorAsSelector(&sel); err != nil {
			return fmt.Errorf("webhook: object selector: %w", err)
		}
		c.objectSelector = &sel
		return nil
	}
}

// configOf applies opts.
func configOf(opts []Option) (hookConfig, error) {
	var c hookConfig
	for _, o := range opts {
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// AddValidator serves v at /validate-GROUP-VERSION-KIND for T's kind in
// the server's scheme, for creates, updates and deletes (those v has a
// function for); opts adjust its webhook's entry in the configurations
// (ObjectSelector).
func AddValidator[T object.Object](s *Server, v Validator[T], opts ...Option) error {
	gvk, err := kindOfType[T](s)
	if err != nil {
		return err
	}
	cfg, err := configOf(opts)
	if err != nil {
		return err
	}
	var verbs []string
	for verb, set := range map[string]bool{"CREATE": v.Create != nil, "UPDATE": v.Update != nil, "DELETE": v.Delete != nil} {
		if set {
			verbs = append(verbs, verb)
		}
	}
	if len(verbs) == 0 {
		return fmt.Errorf("webhook: the validator of %s has no function", gvk.Kind)
	}
	slices.Sort(verbs) // CREATE, DELETE, UPDATE: one order whatever the map's
	h := &admitter[T]{gvk: gvk, validate: v}
	path := admissionPath("validate", gvk)
	return s.register(path, &hook{path: path, gvk: gvk, verbs: verbs, config: cfg}, h.serve)
}

// AddDefaulter serves d at /mutate-GROUP-VERSION-KIND for T's kind in the
// server's scheme, for creates and updates; opts adjust its webhook's entry
// in the configurations (ObjectSelector).
func AddDefaulter[T object.Object](s *Server, d Defaulter[T], opts ...Option) error {
	gvk, err := kindOfType[T](s)
	if err != nil {
		return err
	}
	cfg, err := configOf(opts)
	if err != nil {
		return err
	}
	if d == nil {
		return fmt.Errorf("webhook: the defaulter of %s is nil", gvk.Kind)
	}
	h := &admitter[T]{gvk: gvk, def: d}
	path := admissionPath("mutate", gvk)
	return s.register(path, &hook{path: path, gvk: gvk, mutating: true, verbs: []string{"CREATE", "UPDATE"}, config: cfg}, h.serve)
}

// kindOfType returns T's kind in the server's scheme; T must be a pointer
// to a struct.
func kindOfType[T object.Object](s *Server) (schema.GroupVersionKind, error) {
	obj, err := newOf[T]()
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	ro, ok := any(obj).(runtime.Object)
	if !ok {
		return schema.GroupVersionKind{}, fmt.Errorf("webhook: %T is not a runtime.Object", obj)
	}
	return s.kindOf(ro)
}

// newOf returns a new T, a pointer to a zero struct.
func newOf[T object.Object]() (T, error) {
	var zero T
	t := reflect.TypeOf(zero)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return zero, fmt.Errorf("webhook: %v is not a pointer to an API type struct", t)
	}
	return reflect.New(t.Elem()).Interface().(T), nil
}

// admitter answers AdmissionReviews for one kind, with a validator or a
// defaulter.
type admitter[T object.Object] struct {
	gvk      schema.GroupVersionKind
	validate Validator[T]
	def      Defaulter[T]
}

// badRequest is a request the server cannot answer with a review: its
// message goes back with a 4xx status.
type badRequest struct {
	code int
	msg  string
}

func (e *badRequest) Error() string { return e.msg }

// serve answers the AdmissionReview in body.
func (a *admitter[T]) serve(w http.ResponseWriter, r *http.Request, body []byte) {
	review, err := readReview(body)
	if err == nil {
		err = a.checkKind(review.Request)
	}
	if err != nil {
		writeBad(w, err)
		return
	}
	req := review.Request
	resp, err := a.admit(context.WithValue(r.Context(), requestKey{}, req), req)
	if err != nil {
		writeBad(w, err)
		return
	}
	resp.UID = req.UID
	if !resp.Allowed {
		markRejected(r)
	}
	writeJSON(w, http.StatusOK, admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"}, Response: resp})
}

// answerCanary answers Install's canary: it denies the review with
// canaryReached, which the API server's answer to the canary's dry-run
// create then carries, showing that its call reached this server.
func answerCanary(w http.ResponseWriter, _ *http.Request, body []byte) {
	review, err := readReview(body)
	if err != nil {
		writeBad(w, err)
		return
	}
	writeJSON(w, http.StatusOK, admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false,
			Result: &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Message: canaryReached}}})
}

// readReview decodes an admission.k8s.io/v1 AdmissionReview.
func readReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var review admissionv1.AdmissionReview
	if err := utiljson.Unmarshal(body, &review); err != nil {
		return nil, &badRequest{http.StatusBadRequest, "webhook: malformed AdmissionReview: " + err.Error()}
	}
	if err := checkType(review.TypeMeta, admissionv1.SchemeGroupVersion.String(), "AdmissionReview",
		"admissionReviewVersions: [v1] in the webhook configuration"); err != nil {
		return nil, err
	}
	if review.Request == nil {
		return nil, &badRequest{http.StatusBadRequest, "webhook: the AdmissionReview has no request"}
	}
	return &review, nil
}

// checkType refuses a review that is not of kind in apiVersion: another
// version's fields could be read wrong (or not at all), and its answer
// would be of the wrong version.
func checkType(tm metav1.TypeMeta, apiVersion, kind, fix string) error {
	if tm.APIVersion == apiVersion && tm.Kind == kind {
		return nil
	}
	return &badRequest{http.StatusBadRequest, fmt.Sprintf("webhook: the review is apiVersion %q kind %q; this server "+
		"answers %s %s only (set %s)", tm.APIVersion, tm.Kind, apiVersion, kind, fix)}
}

// checkKind refuses a request for a kind this path does not serve (a
// webhook configuration whose rules name another resource).
func (a *admitter[T]) checkKind(req *admissionv1.AdmissionRequest) error {
	if req.Kind.Group != a.gvk.Group || req.Kind.Kind != a.gvk.Kind || req.Kind.Version != a.gvk.Version {
		return &badRequest{http.StatusBadRequest, fmt.Sprintf("webhook: this path serves %s, the request is for %s "+
			"(check the webhook configuration's rules)", a.gvk, schema.GroupVersionKind(req.Kind))}
	}
	return nil
}

// admit decodes the objects and calls the validator or the defaulter.
func (a *admitter[T]) admit(ctx context.Context, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, error) {
	obj, err := a.decode(req.Object, "object", req.Operation != admissionv1.Delete)
	if err != nil {
		return nil, err
	}
	old, err := a.decode(req.OldObject, "oldObject", req.Operation != admissionv1.Create)
	if err != nil {
		return nil, err
	}
	if a.def != nil {
		return a.mutate(ctx, req, obj)
	}
	var warnings Warnings
	switch {
	case req.Operation == admissionv1.Create && a.validate.Create != nil:
		warnings, err = a.validate.Create(ctx, obj)
	case req.Operation == admissionv1.Update && a.validate.Update != nil:
		warnings, err = a.validate.Update(ctx, old, obj)
	case req.Operation == admissionv1.Delete && a.validate.Delete != nil:
		warnings, err = a.validate.Delete(ctx, old)
	}
	return a.response(req, warnings, err), nil
}

// mutate runs the defaulter and answers with the JSON patch of its change.
func (a *admitter[T]) mutate(ctx context.Context, req *admissionv1.AdmissionRequest, obj T) (*admissionv1.AdmissionResponse, error) {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return &admissionv1.AdmissionResponse{Allowed: true}, nil
	}
	before, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("webhook: marshalling %s: %w", a.gvk.Kind, err)
	}
	if err := a.def(ctx, obj); err != nil {
		return a.response(req, nil, err), nil
	}
	after, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("webhook: marshalling the defaulted %s: %w", a.gvk.Kind, err)
	}
	resp := &admissionv1.AdmissionResponse{Allowed: true}
	if bytes.Equal(before, after) {
		return resp, nil // nothing defaulted: no patch to compute
	}
	patch, err := diffJSON(req.Object.Raw, before, after)
	if err != nil {
		return nil, fmt.Errorf("webhook: the patch of the defaulted %s: %w", a.gvk.Kind, err)
	}
	if len(patch) > 0 {
		pt := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &pt
		if resp.Patch, err = json.Marshal(patch); err != nil {
			return nil, err
		}
	}
	return resp, nil
}

// decode decodes one of the request's objects into a new T; a missing
// object is an error only if want.
func (a *admitter[T]) decode(raw runtime.RawExtension, field string, want bool) (T, error) {
	var zero T
	if len(raw.Raw) == 0 {
		if want {
			return zero, &badRequest{http.StatusBadRequest, "webhook: the request has no " + field}
		}
		return zero, nil
	}
	obj, err := newOf[T]()
	if err != nil {
		return zero, err
	}
	if err := utiljson.Unmarshal(raw.Raw, obj); err != nil {
		return zero, &badRequest{http.StatusBadRequest, fmt.Sprintf("webhook: the request's %s does not decode as %s: %v",
			field, a.gvk.Kind, err)}
	}
	return obj, nil
}

// response turns a handler's verdict into an admission response.
func (a *admitter[T]) response(req *admissionv1.AdmissionRequest, warnings Warnings, err error) *admissionv1.AdmissionResponse {
	resp := &admissionv1.AdmissionResponse{Allowed: err == nil, Warnings: warnings}
	if err != nil {
		st := denial(schema.GroupKind{Group: a.gvk.Group, Kind: a.gvk.Kind}, req.Name, err)
		resp.Result = &st
	}
	return resp
}

// denial is the status that explains why a request was denied.
func denial(gk schema.GroupKind, name string, err error) metav1.Status {
	if errs := fieldErrors(err); errs != nil {
		return apierrors.NewInvalid(gk, name, errs).ErrStatus
	}
	var api apierrors.APIStatus
	if errors.As(err, &api) {
		return api.Status()
	}
	return metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: err.Error()}
}

// fieldErrors returns err's field errors when err is made of nothing else.
func fieldErrors(err error) field.ErrorList {
	var fe *field.Error
	var agg utilerrors.Aggregate
	switch {
	case errors.As(err, &agg):
		var out field.ErrorList
		for _, e := range agg.Errors() {
			if !errors.As(e, &fe) {
				return nil
			}
			out = append(out, fe)
		}
		return out
	case errors.As(err, &fe):
		return field.ErrorList{fe}
	}
	return nil
}
