package apiserver

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
)

// crdYAML is a namespaced CRD of kind in group, served at v1.
func crdYAML(group, kind string) string {
	plural := strings.ToLower(kind) + "s"
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[3]s.%[1]s
spec:
  group: %[1]s
  scope: Namespaced
  names: {kind: %[2]s, listKind: %[2]sList, plural: %[3]s, singular: %[4]s}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, group, kind, plural, strings.ToLower(kind))
}

// uniqueGroup is an API group no other test uses.
func uniqueGroup(t *testing.T, i int) string {
	return fmt.Sprintf("g%d-%d.%s.test", i, time.Now().UnixNano(), strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-")))
}

func TestInstallCRDs_aCreateRightAfterWorksThroughDiscovery(t *testing.T) {
	srv := env.Get(t) // the shared server outlives the test
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	hc, err := rest.HTTPClientFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { utilnet.CloseIdleConnectionsFor(hc.Transport) })
	dyn, err := dynamic.NewForConfigAndClient(srv.Config(), hc)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		groups := []string{uniqueGroup(t, 3*round), uniqueGroup(t, 3*round+1), uniqueGroup(t, 3*round+2)}
		fsys := fstest.MapFS{
			// Two CRDs in one multi-document file, one in a folder, and a file that is not a manifest.
			"crds.yaml":     {Data: []byte("---\n" + crdYAML(groups[0], "Widget") + "---\n" + crdYAML(groups[1], "Widget"))},
			"more/one.yml":  {Data: []byte(crdYAML(groups[2], "Gadget"))},
			"more/README":   {Data: []byte("not a manifest")},
			"more/empty.ym": {Data: nil},
		}
		start := time.Now()
		if err := InstallCRDs(t.Context(), srv.Config(), fsys); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		// A fresh discovery-based mapper, as a manager or client starting now
		// would build: it must know every new kind at once.
		disc, err := discovery.NewDiscoveryClientForConfigAndClient(srv.Config(), hc)
		if err != nil {
			t.Fatal(err)
		}
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
		for i, gvk := range []schema.GroupVersionKind{
			{Group: groups[0], Version: "v1", Kind: "Widget"},
			{Group: groups[1], Version: "v1", Kind: "Widget"},
			{Group: groups[2], Version: "v1", Kind: "Gadget"},
		} {
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)

			if err != nil {
				t.Fatalf("round %d, kind %d: mapping right after InstallCRDs (took %s): %v", round, i, took, err)
			}
			obj := &unstructured.Unstructured{}
			obj.SetGroupVersionKind(gvk)
			obj.SetName("first")
			if _, err := dyn.Resource(m.Resource).Namespace(ns).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
				t.Fatalf("round %d: create %s right after InstallCRDs: %v", round, gvk, err)
			}
		}
		t.Logf("round %d: 3 CRDs served after %s", round, took.Round(time.Millisecond))
		if round == 0 { // installing again updates nothing and returns at once
			start := time.Now()
			if err := InstallCRDs(t.Context(), srv.Config(), fsys); err != nil {
				t.Fatalf("second install: %v", err)
			}
			t.Logf("second install of the same CRDs: %s", time.Since(start).Round(time.Millisecond))
		}
	}
}

func TestInstallCRDs_conflictingNamesFailAtOnceNamingTheCRDAndCondition(t *testing.T) {
	srv := env.Get(t)
	leakcheck.Check(t)
	group := uniqueGroup(t, 0)
	if err := InstallCRDs(t.Context(), srv.Config(), fstest.MapFS{"a.yaml": {Data: []byte(crdYAML(group, "Widget"))}}); err != nil {
		t.Fatal(err)
	}
	// Another plural, the same kind in the same group: the server refuses the names.
	clash := strings.Replace(crdYAML(group, "Widget"), "plural: widgets", "plural: clashes", 1)
	clash = strings.Replace(clash, "name: widgets.", "name: clashes.", 1)
	clash = strings.Replace(clash, "singular: widget", "singular: clash", 1)
	start := time.Now()
	err := InstallCRDs(t.Context(), srv.Config(), fstest.MapFS{"b.yaml": {Data: []byte(clash)}})
	if err == nil {
		t.Fatal("InstallCRDs of a CRD whose kind is in use = nil, want an error")
	}
	for _, want := range []string{"clashes." + group, "NamesAccepted is False", "already in use", "b.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the conflict was reported after %s; want at once", took)
	}
}

func TestInstallCRDs_badManifestsAreRefusedNamingTheFile(t *testing.T) {
	cfg := &rest.Config{Host: "127.0.0.1:1"} // never reached: the manifests are read first
	for _, tc := range []struct {
		name string
		fsys fstest.MapFS
		want string
	}{
		{"no manifest at all", fstest.MapFS{"README.md": {Data: []byte("# hi")}}, "no CustomResourceDefinition found"},
		{"a document of another kind", fstest.MapFS{"x/all.yaml": {Data: []byte(crdYAML("a.test", "Widget") +
			"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n")}},
			"x/all.yaml, document 2: a v1 ConfigMap, not an apiextensions.k8s.io/v1 CustomResourceDefinition"},
		{"malformed YAML", fstest.MapFS{"bad.yaml": {Data: []byte("apiVersion: [unclosed\n")}}, "bad.yaml, document 1"},
		{"a CRD without a served version", fstest.MapFS{"c.yaml": {Data: []byte(strings.Replace(crdYAML("a.test", "Widget"),
			"served: true", "served: false", 1))}}, "c.yaml, document 1: CustomResourceDefinition \"widgets.a.test\" needs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := InstallCRDs(t.Context(), cfg, tc.fsys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("InstallCRDs = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
