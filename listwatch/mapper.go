package listwatch

import (
	"context"
	"reflect"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// groupVersionMapper is the RESTMapper of NewDiscovery: it reads discovery
// one group version at a time, the first time a kind of it is mapped, and
// keeps only the kinds' resources and scopes (until Reset). A controller
// maps a few kinds of a few group versions; reading all of the server's
// discovery for them cost every process (and every cluster of a fleet)
// about 200 kB of mappings it never used. The questions it cannot answer
// from one group version (a kind with no version, a resource to a kind,
// plurals) go to a mapper over the whole of discovery, made when first
// needed.
type groupVersionMapper struct {
	dc discovery.DiscoveryInterface

	mu     sync.Mutex
	served map[schema.GroupVersion]map[string]kindResource // by kind
	full   meta.ResettableRESTMapper                       // made when first needed
}

// kindResource is where a kind is served in its group version.
type kindResource struct {
	resource   string
	namespaced bool
}

func newGroupVersionMapper(dc discovery.DiscoveryInterface) *groupVersionMapper {
	return &groupVersionMapper{dc: dc, served: map[schema.GroupVersion]map[string]kindResource{}}
}

// restMapping is m.RESTMapping(gk, version), with ctx bounding the
// discovery request when m is NewDiscovery's mapper.
func restMapping(ctx context.Context, m meta.RESTMapper, gk schema.GroupKind, version string) (*meta.RESTMapping, error) {
	if gvm, ok := m.(*groupVersionMapper); ok {
		return gvm.restMapping(ctx, gk, version)
	}
	return m.RESTMapping(gk, version)
}

// RESTMapping maps gk in the first of versions that serves it; with no
// version, the whole of discovery picks the preferred one.
func (m *groupVersionMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return m.restMapping(context.Background(), gk, versions...)
}

func (m *groupVersionMapper) restMapping(ctx context.Context, gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) == 0 {
		return m.fullMapper().RESTMapping(gk)
	}
	for _, v := range versions {
		gv := schema.GroupVersion{Group: gk.Group, Version: v}
		kinds, err := m.groupVersion(ctx, gv)
		if err != nil {
			return nil, err
		}
		if r, ok := kinds[gk.Kind]; ok {
			scope := meta.RESTScopeRoot
			if r.namespaced {
				scope = meta.RESTScopeNamespace
			}
			return &meta.RESTMapping{Resource: gv.WithResource(r.resource), GroupVersionKind: gv.WithKind(gk.Kind), Scope: scope}, nil
		}
	}
	return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
}

// groupVersion returns the kinds gv serves, reading its discovery once; a
// group version the server does not serve serves no kind (not kept, so
// that a CustomResourceDefinition installed since is found).
func (m *groupVersionMapper) groupVersion(ctx context.Context, gv schema.GroupVersion) (map[string]kindResource, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if kinds, ok := m.served[gv]; ok {
		return kinds, nil
	}
	list, err := m.read(ctx, gv)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	kinds := map[string]kindResource{}
	for _, r := range list.APIResources {
		if strings.Contains(r.Name, "/") { // a subresource
			continue
		}
		if _, dup := kinds[r.Kind]; !dup {
			kinds[r.Kind] = kindResource{resource: r.Name, namespaced: r.Namespaced}
		}
	}
	m.served[gv] = kinds
	return kinds, nil
}

// read reads gv's discovery, as the discovery client's
// ServerResourcesForGroupVersion does, but bounded by ctx (the client's
// method takes none: against a server that stopped answering it waits out
// the transport's timeouts, holding m's lock).
func (m *groupVersionMapper) read(ctx context.Context, gv schema.GroupVersion) (*metav1.APIResourceList, error) {
	rc := m.dc.RESTClient()
	if rc == nil || reflect.ValueOf(rc).IsNil() { // a fake
		return m.dc.ServerResourcesForGroupVersion(gv.String())
	}
	path := "/apis/" + gv.String()
	if gv.Group == "" {
		path = "/api/" + gv.Version
	}
	list := &metav1.APIResourceList{GroupVersion: gv.String()}
	if err := rc.Get().AbsPath(path).Do(ctx).Into(list); err != nil {
		return nil, err
	}
	return list, nil
}

// RESTMappings returns gk's mapping in each of versions that serves it;
// with no version, every version's (from the whole of discovery).
func (m *groupVersionMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	if len(versions) == 0 {
		return m.fullMapper().RESTMappings(gk)
	}
	var out []*meta.RESTMapping
	for _, v := range versions {
		mp, err := m.RESTMapping(gk, v)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, mp)
	}
	if len(out) == 0 {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return out, nil
}

// Reset forgets every group version read, so the next mapping reads
// discovery again.
func (m *groupVersionMapper) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.served)
	if m.full != nil {
		m.full.Reset()
	}
}

func (m *groupVersionMapper) fullMapper() meta.ResettableRESTMapper {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full == nil {
		m.full = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(m.dc))
	}
	return m.full
}

func (m *groupVersionMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return m.fullMapper().KindFor(resource)
}

func (m *groupVersionMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return m.fullMapper().KindsFor(resource)
}

func (m *groupVersionMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return m.fullMapper().ResourceFor(input)
}

func (m *groupVersionMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return m.fullMapper().ResourcesFor(input)
}

func (m *groupVersionMapper) ResourceSingularizer(resource string) (string, error) {
	return m.fullMapper().ResourceSingularizer(resource)
}
