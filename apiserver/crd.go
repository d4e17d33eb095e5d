package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdFieldManager owns the fields InstallCRDs applies.
const crdFieldManager = "ctrlkit-install-crds"

// crdPoll is how often InstallCRDs looks at CRDs it waits for, and
// crdDefaultTimeout bounds the wait when ctx has no deadline.
const (
	crdPoll           = 50 * time.Millisecond
	crdDefaultTimeout = time.Minute
)

// InstallCRDs applies the CustomResourceDefinitions in the manifests of fsys
// to the API server of cfg (any cluster, not only one this package started)
// and returns once every one of them is served: its Established condition is
// True, a LIST of each served version answers through the resource's REST
// path, and discovery lists it. Each of the three can lag the others (on
// this package's server, discovery has been seen two seconds behind
// Established), and clients that map a kind to its resource through
// discovery (the manager's informers, REST mappers) fail until it catches
// up. After InstallCRDs, a first create works, whichever way it is made.
//
// Every file of fsys ending in .yaml, .yml or .json is read, in lexical order
// through subdirectories; a file may hold several YAML documents, each an
// apiextensions.k8s.io/v1 CustomResourceDefinition (anything else is an
// error naming the file and document). A CRD that exists is updated by
// server-side apply (field manager "ctrlkit-install-crds", forced). After
// such an update the old schema can still be served for a moment: the
// checks above cannot tell the versions apart.
//
// It fails at once when a CRD's names conflict with another CRD's
// (NamesAccepted False) or the CRD is being deleted, and otherwise when ctx
// ends (or after a minute if ctx has no deadline), naming each CRD that is
// not served and its conditions.
func InstallCRDs(ctx context.Context, cfg *rest.Config, fsys fs.FS) error {
	crds, err := readCRDs(fsys)
	if err != nil {
		return err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	defer utilnet.CloseIdleConnectionsFor(hc.Transport)
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("install CRDs: %w", err)
	}
	for _, c := range crds {
		_, err := dyn.Resource(crdResource).Apply(ctx, c.obj.GetName(), c.obj,
			metav1.ApplyOptions{FieldManager: crdFieldManager, Force: true})
		if err != nil {
			return fmt.Errorf("install CRD %s (%s): %w", c.obj.GetName(), c.source, err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, crdDefaultTimeout)
		defer cancel()
	}
	w := crdWaiter{dyn: dyn, disc: disc, crds: crds}
	return w.wait(ctx)
}

// crd is one CustomResourceDefinition read from a manifest, and what
// InstallCRDs has seen of it so far.
type crd struct {
	obj    *unstructured.Unstructured
	source string // "file.yaml, document 2"
	gvrs   []schema.GroupVersionResource
	// state says what is still missing ("" once served), for the error
	// if ctx ends.
	state string
	// listed is set once every served version answered a LIST.
	listed bool
}

// readCRDs reads every CRD of fsys; it fails on anything else, and when
// there is none.
func readCRDs(fsys fs.FS) ([]*crd, error) {
	var crds []*crd
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !slices.Contains([]string{".yaml", ".yml", ".json"}, path.Ext(p)) {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		got, err := decodeCRDs(p, data)
		crds = append(crds, got...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read CRDs: %w", err)
	}
	if len(crds) == 0 {
		return nil, errors.New("read CRDs: no CustomResourceDefinition found (looked for .yaml, .yml and .json files)")
	}
	return crds, nil
}

// decodeCRDs decodes the YAML or JSON documents of one file.
func decodeCRDs(file string, data []byte) ([]*crd, error) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var crds []*crd
	for i := 1; ; i++ {
		var m map[string]any
		err := dec.Decode(&m)
		if err == io.EOF {
			return crds, nil
		}
		src := fmt.Sprintf("%s, document %d", file, i)
		if err != nil {
			return crds, fmt.Errorf("%s: %w", src, err)
		}
		if len(m) == 0 {
			continue // an empty document, e.g. after a leading "---"
		}
		c, err := newCRD(src, &unstructured.Unstructured{Object: m})
		if err != nil {
			return crds, err
		}
		crds = append(crds, c)
	}
}

func newCRD(src string, obj *unstructured.Unstructured) (*crd, error) {
	if obj.GetAPIVersion() != "apiextensions.k8s.io/v1" || obj.GetKind() != "CustomResourceDefinition" {
		return nil, fmt.Errorf("%s: a %s %s, not an apiextensions.k8s.io/v1 CustomResourceDefinition",
			src, obj.GetAPIVersion(), obj.GetKind())
	}
	group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
	c := &crd{obj: obj, source: src, state: "not created"}
	for _, v := range versions {
		v, _ := v.(map[string]any)
		if served, _ := v["served"].(bool); served {
			name, _ := v["name"].(string)
			c.gvrs = append(c.gvrs, schema.GroupVersionResource{Group: group, Version: name, Resource: plural})
		}
	}
	if obj.GetName() == "" || group == "" || plural == "" || len(c.gvrs) == 0 {
		return nil, fmt.Errorf("%s: CustomResourceDefinition %q needs metadata.name, spec.group, "+
			"spec.names.plural and a served version", src, obj.GetName())
	}
	return c, nil
}

// crdWaiter polls the CRDs until each is served.
type crdWaiter struct {
	dyn  dynamic.Interface
	disc discovery.DiscoveryInterface
	crds []*crd
}

func (w *crdWaiter) wait(ctx context.Context) error {
	tick := time.NewTicker(crdPoll)
	defer tick.Stop()
	for {
		done, err := w.check(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return w.timeout(ctx)
		case <-tick.C:
		}
	}
}

// check looks once at every CRD not yet answering LIST, then at discovery
// once all of them do. It returns an error only for a CRD that cannot be
// served.
func (w *crdWaiter) check(ctx context.Context) (bool, error) {
	listed := true
	for _, c := range w.crds {
		if c.listed {
			continue
		}
		if err := w.checkOne(ctx, c); err != nil {
			return false, err
		}
		listed = listed && c.listed
	}
	if !listed {
		return false, nil
	}
	_, lists, err := w.disc.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		for _, c := range w.crds {
			c.state = "established and answering LIST, but discovery fails: " + err.Error()
		}
		return false, nil
	}
	served := map[schema.GroupVersionResource]bool{}
	for _, l := range lists {
		gv, _ := schema.ParseGroupVersion(l.GroupVersion)
		for _, r := range l.APIResources {
			served[gv.WithResource(r.Name)] = true
		}
	}
	all := true
	for _, c := range w.crds {
		c.state = ""
		for _, gvr := range c.gvrs {
			if !served[gvr] {
				c.state = "established and answering LIST, but discovery does not list " + gvr.GroupVersion().String() + " " + gvr.Resource + " yet"
				all = false
			}
		}
	}
	return all, nil
}

// checkOne reads c's conditions and, once it is established, lists each of
// its served versions.
func (w *crdWaiter) checkOne(ctx context.Context, c *crd) error {
	got, err := w.dyn.Resource(crdResource).Get(ctx, c.obj.GetName(), metav1.GetOptions{})
	if err != nil {
		c.state = "cannot read it: " + err.Error()
		return nil
	}
	conds := conditions(got)
	if got.GetDeletionTimestamp() != nil {
		return fmt.Errorf("CRD %s is being deleted; wait until it is gone, then install it again (%s)",
			c.obj.GetName(), conds)
	}
	if na := findCondition(got, "NamesAccepted"); na != nil && na["status"] == "False" {
		return fmt.Errorf("CRD %s cannot be established: NamesAccepted is False (%v: %v); "+
			"another CRD serves these names: rename one of them (%s)", c.obj.GetName(), na["reason"], na["message"], c.source)
	}
	if est := findCondition(got, "Established"); est == nil || est["status"] != "True" {
		c.state = "not established: " + conds
		return nil
	}
	for _, gvr := range c.gvrs {
		if _, err := w.dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			c.state = fmt.Sprintf("established, but a LIST of %s fails: %v", gvr, err)
			return nil
		}
	}
	c.listed = true
	return nil
}

func (w *crdWaiter) timeout(ctx context.Context) error {
	var pending []string
	for _, c := range w.crds {
		if c.state != "" {
			pending = append(pending, fmt.Sprintf("CRD %s (%s): %s", c.obj.GetName(), c.source, c.state))
		}
	}
	return fmt.Errorf("CRDs not served: %w: %s", context.Cause(ctx), strings.Join(pending, "; "))
}

// findCondition returns the condition of type typ in obj's status.
func findCondition(obj *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// conditions lists obj's status conditions: "Established=False (Reason: message), ...".
func conditions(obj *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	var s []string
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok {
			s = append(s, fmt.Sprintf("%v=%v (%v: %v)", m["type"], m["status"], m["reason"], m["message"]))
		}
	}
	if len(s) == 0 {
		return "no conditions yet"
	}
	return strings.Join(s, ", ")
}
