package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// ClientConfig is how the API server reaches the Server: URL or Service,
// and the CA bundle that signed its certificate.
type ClientConfig struct {
	// URL is the server's base URL, e.g. "https://127.0.0.1:9443" (each
	// webhook's path is appended). Exclusive with Service.
	URL string
	// Service is the Service in front of the server (its Path is set per
	// webhook). Exclusive with URL.
	Service *admissionregistrationv1.ServiceReference
	// CABundle is the PEM certificate(s) that signed the serving
	// certificate (SelfSigned returns one).
	CABundle []byte
	// FailurePolicy is what the API server does when the webhook cannot
	// be called (down, timing out, answering an error). Default: Fail,
	// the request is refused; Ignore lets it through unchecked.
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// TimeoutSeconds bounds each call. Default: 10.
	TimeoutSeconds int32
	// NamespaceSelector limits the admission webhooks to the objects of
	// the namespaces it selects (e.g. leave kube-system out). Default: all.
	NamespaceSelector *metav1.LabelSelector
	// NamespaceSelectorFor, when set, gives the namespace selector of the
	// webhooks of each API group ("" the core group) instead, where it
	// returns one (nil: NamespaceSelector): the manager's manifests leave
	// the program's own namespace out of the webhooks of Kubernetes' own
	// kinds only.
	NamespaceSelectorFor func(group string) *metav1.LabelSelector
	// RequireReached makes Install return only once the API server's call
	// reached this Server (the canary's answer came from it), and fail
	// after a minute otherwise. By default Install returns once the
	// configurations are in force, reached or not: a Service may not yet
	// route to a replica that is starting.
	RequireReached bool
}

// webhookClientConfig returns cc's client configuration for path.
func (cc ClientConfig) webhookClientConfig(path string) (admissionregistrationv1.WebhookClientConfig, error) {
	out := admissionregistrationv1.WebhookClientConfig{CABundle: cc.CABundle}
	switch {
	case (cc.URL == "") == (cc.Service == nil):
		return out, errors.New("webhook: ClientConfig needs exactly one of URL and Service")
	case cc.URL != "":
		u := strings.TrimSuffix(cc.URL, "/") + path
		out.URL = &u
	default:
		svc := *cc.Service
		svc.Path = &path
		out.Service = &svc
	}
	return out, nil
}

// Configurations returns the webhook configurations that send the API
// server's admission requests to the registered validators and defaulters:
// one rule per kind, for the operations each handles, the resource named
// by mapper (nil: the lower-case plural of the kind, right for CRDs unless
// they name another plural). A configuration with no webhook is nil.
func (s *Server) Configurations(cc ClientConfig, mapper meta.RESTMapper) (*admissionregistrationv1.ValidatingWebhookConfiguration,
	*admissionregistrationv1.MutatingWebhookConfiguration, error) {
	s.mu.Lock()
	hooks := append([]hook(nil), s.hooks...)
	s.mu.Unlock()
	policy := cc.FailurePolicy
	if policy == "" {
		policy = admissionregistrationv1.Fail
	}
	timeout := cc.TimeoutSeconds
	if timeout == 0 {
		timeout = 10
	}
	none := admissionregistrationv1.SideEffectClassNone
	var vwc *admissionregistrationv1.ValidatingWebhookConfiguration
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	// A kind with a webhook of one type in several versions gets
	// matchPolicy Exact, so that each version's handler reviews its own
	// version's requests only; one version alone keeps the default,
	// Equivalent: it reviews the requests of every version, converted.
	versions := map[hookKind]int{}
	for _, h := range hooks {
		versions[hookKind{h.gvk.GroupKind(), h.mutating}]++
	}
	for _, h := range hooks {
		match := admissionregistrationv1.Equivalent
		if versions[hookKind{h.gvk.GroupKind(), h.mutating}] > 1 {
			match = admissionregistrationv1.Exact
		}
		name, client, rules, err := h.webhook(cc, mapper)
		if err != nil {
			return nil, nil, err
		}
		namespaces := cc.NamespaceSelector
		if cc.NamespaceSelectorFor != nil {
			if sel := cc.NamespaceSelectorFor(rules[0].APIGroups[0]); sel != nil {
				namespaces = sel
			}
		}
		if h.mutating {
			if mwc == nil {
				mwc = &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: s.configName(true)}}
			}
			mwc.Webhooks = append(mwc.Webhooks, admissionregistrationv1.MutatingWebhook{Name: name, ClientConfig: client,
				Rules: rules, FailurePolicy: &policy, MatchPolicy: &match, SideEffects: &none, TimeoutSeconds: &timeout,
				AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: namespaces, ObjectSelector: h.config.objectSelector})
			continue
		}
		if vwc == nil {
			vwc = &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: s.configName(false)}}
		}
		vwc.Webhooks = append(vwc.Webhooks, admissionregistrationv1.ValidatingWebhook{Name: name, ClientConfig: client,
			Rules: rules, FailurePolicy: &policy, MatchPolicy: &match, SideEffects: &none, TimeoutSeconds: &timeout,
			AdmissionReviewVersions: []string{"v1"}, NamespaceSelector: namespaces, ObjectSelector: h.config.objectSelector})
	}
	return vwc, mwc, nil
}

// webhook is h's webhook's name, client configuration and rules.
func (h hook) webhook(cc ClientConfig, mapper meta.RESTMapper) (string, admissionregistrationv1.WebhookClientConfig,
	[]admissionregistrationv1.RuleWithOperations, error) {
	gvr, err := resourceOf(h.gvk, mapper)
	if err != nil {
		return "", admissionregistrationv1.WebhookClientConfig{}, nil, err
	}
	client, err := cc.webhookClientConfig(h.path)
	if err != nil {
		return "", client, nil, err
	}
	var ops []admissionregistrationv1.OperationType
	for _, v := range h.verbs {
		ops = append(ops, admissionregistrationv1.OperationType(v))
	}
	rules := []admissionregistrationv1.RuleWithOperations{{Operations: ops, Rule: admissionregistrationv1.Rule{
		APIGroups: []string{gvr.Group}, APIVersions: []string{gvr.Version}, Resources: []string{gvr.Resource}}}}
	group := gvr.Group
	if group == "" {
		group = "core"
	}
	verb, _, _ := strings.Cut(strings.TrimPrefix(h.path, "/"), "-")
	// The version is in the name: one kind served in two versions has a
	// webhook for each, and names must differ within a configuration.
	return verb + "." + gvr.Version + "." + gvr.Resource + "." + group, client, rules, nil
}

// Registered reports whether the server has anything to serve (a webhook
// or a conversion), and the kinds it converts, sorted.
func (s *Server) Registered() (serves bool, converted []schema.GroupKind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for gk := range s.conv {
		converted = append(converted, gk)
	}
	slices.SortFunc(converted, func(a, b schema.GroupKind) int { return strings.Compare(a.String(), b.String()) })
	return len(s.hooks) > 0 || len(converted) > 0, converted
}

// ConfigurationNames returns the names of the configurations
// Configurations makes, the validating one's and the mutating one's: ""
// for a type of which no webhook is registered (Configurations makes no
// configuration of it).
func (s *Server) ConfigurationNames() (validating, mutating string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.hooks {
		if h.mutating {
			mutating = s.configName(true)
		} else {
			validating = s.configName(false)
		}
	}
	return validating, mutating
}

// configName is the name of the server's mutating configuration, or of its
// validating one: NAME-mutating, NAME-validating.
func (s *Server) configName(mutating bool) string {
	if mutating {
		return s.opts.Name + "-mutating"
	}
	return s.opts.Name + "-validating"
}

// hookKind is a kind's webhooks of one type, validating or mutating.
type hookKind struct {
	gk       schema.GroupKind
	mutating bool
}

// Manifests returns Configurations as YAML documents, with their kind and
// API version, for kubectl apply or a GitOps repository; the conversion
// of each converted kind is a CRD patch (spec.conversion) in a comment,
// since the CRD itself comes from controller-gen.
func (s *Server) Manifests(cc ClientConfig, mapper meta.RESTMapper) ([]byte, error) {
	vwc, mwc, err := s.Configurations(cc, mapper)
	if err != nil {
		return nil, err
	}
	var docs [][]byte
	if mwc != nil {
		mwc.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"}
		docs = append(docs, mustYAML(mwc))
	}
	if vwc != nil {
		vwc.TypeMeta = metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"}
		docs = append(docs, mustYAML(vwc))
	}
	s.mu.Lock()
	var kinds []string
	for gk := range s.conv {
		kinds = append(kinds, gk.String())
	}
	s.mu.Unlock()
	slices.Sort(kinds)
	if len(kinds) > 0 {
		client, err := cc.webhookClientConfig(ConvertPath)
		if err != nil {
			return nil, err
		}
		patch := mustYAML(map[string]any{"spec": map[string]any{"conversion": map[string]any{"strategy": "Webhook",
			"webhook": map[string]any{"clientConfig": client, "conversionReviewVersions": []string{"v1"}}}}})
		docs = append(docs, []byte("# The CRDs of "+strings.Join(kinds, ", ")+" need this conversion (merge it into each CRD):\n#   "+
			strings.ReplaceAll(strings.TrimSpace(string(patch)), "\n", "\n#   ")+"\n"))
	}
	return bytes.Join(docs, []byte("---\n")), nil
}

// mustYAML marshals v, which is made of API types and maps: it cannot fail.
func mustYAML(v any) []byte {
	b, err := yaml.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// resourceOf names gvk's resource through mapper, or by the plural guess.
func resourceOf(gvk schema.GroupVersionKind, mapper meta.RESTMapper) (schema.GroupVersionResource, error) {
	if mapper == nil {
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		return gvr, nil
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("webhook: the resource of %s: %w", gvk, err)
	}
	return m.Resource, nil
}

// Install writes the webhook configurations (creating or replacing them)
// and points the CRD of each kind with a registered conversion at
// ConvertPath, and returns once the API server calls the admission
// webhooks: its admission plugin picks configurations up from an
// informer, so Install adds to each a canary webhook matching only a
// ConfigMap with a label of its own, and creates that ConfigMap in
// dry-run (in the default namespace: nothing is stored) until the API
// server's answer names the canary, within a minute. Resources are named
// by the server's discovery. It needs the permission to write
// webhook configurations and CRDs: a set-up step for tests, demos and
// development clusters; in production, apply the same configurations from
// manifests (Configurations) with a certificate manager filling caBundle.
func (s *Server) Install(ctx context.Context, cfg *rest.Config, cc ClientConfig) error {
	kube, hc, err := oneShotClients(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClient(kube.RESTClient())))
	vwc, mwc, err := s.Configurations(cc, mapper)
	if err != nil {
		return err
	}
	if vwc != nil {
		if err := upsert(ctx, kube.AdmissionregistrationV1().ValidatingWebhookConfigurations(), withCanary(vwc, cc)); err != nil {
			return err
		}
	}
	if mwc != nil {
		if err := upsert(ctx, kube.AdmissionregistrationV1().MutatingWebhookConfigurations(), withCanary(mwc, cc)); err != nil {
			return err
		}
	}
	if err := s.installConversions(ctx, cfg, hc, cc, mapper); err != nil {
		return err
	}
	for _, c := range []metav1.Object{vwc, mwc} {
		if !reflect.ValueOf(c).IsNil() {
			if err := waitForCanary(ctx, kube, c.GetName(), cc.RequireReached); err != nil {
				return err
			}
		}
	}
	return nil
}

// The canary: Install adds to each configuration it writes a webhook that
// matches only a ConfigMap labelled canaryLabel=<a hash of its name>,
// and creates such a ConfigMap in dry-run until the API server refuses it
// naming the canary. The API server's admission plugin picks configurations
// up from an informer, so a configuration just written is not called yet;
// once its canary is, the rest of the same configuration is too.
const (
	canaryLabel     = "webhook.ctrlkit.io/canary"
	canaryPath      = "/ctrlkit-canary" // served by every Server (answerCanary); a call that fails names the canary all the same
	canaryReached   = "ctrlkit webhook canary: the API server's call reached the webhook server"
	canaryNamespace = "default"
	canaryWait      = time.Minute
)

// canaryName is the canary webhook's name in the configuration called config.
func canaryName(config string) string { return "canary." + config + ".webhook.ctrlkit.io" }

// canaryValue is the canary label's value for config: a hash, since a
// label value has at most 63 characters and a name up to 253.
func canaryValue(config string) string {
	sum := sha256.Sum256([]byte(config))
	return hex.EncodeToString(sum[:16])
}

// canaryRules are the canary's rules: creates of ConfigMaps.
func canaryRules() []admissionregistrationv1.RuleWithOperations {
	return []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}
}

// withCanary returns c with the canary webhook added (a copy: the one
// Configurations returns is unchanged).
func withCanary[C *admissionregistrationv1.ValidatingWebhookConfiguration | *admissionregistrationv1.MutatingWebhookConfiguration](c C, cc ClientConfig) C {
	client, _ := cc.webhookClientConfig(canaryPath) // cc was checked by Configurations
	fail, none, timeout := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, int32(5)
	switch c := any(c).(type) {
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		out := c.DeepCopy()
		out.Webhooks = append(out.Webhooks, admissionregistrationv1.ValidatingWebhook{Name: canaryName(c.Name), ClientConfig: client,
			Rules: canaryRules(), FailurePolicy: &fail, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{canaryLabel: canaryValue(c.Name)}}})
		return any(out).(C)
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		out := c.DeepCopy()
		out.Webhooks = append(out.Webhooks, admissionregistrationv1.MutatingWebhook{Name: canaryName(c.Name), ClientConfig: client,
			Rules: canaryRules(), FailurePolicy: &fail, SideEffects: &none, TimeoutSeconds: &timeout, AdmissionReviewVersions: []string{"v1"},
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{canaryLabel: canaryValue(c.Name)}}})
		return any(out).(C)
	}
	return c
}

// waitForCanary creates the canary ConfigMap of config in dry-run (nothing
// is stored) until the API server's answer names the canary webhook: the
// configuration is then in force; with reached, until that answer is the
// canary's own (canaryReached: the call reached the server). It gives up
// after canaryWait.
func waitForCanary(ctx context.Context, kube kubernetes.Interface, config string, reached bool) error {
	ctx, cancel := context.WithTimeout(ctx, canaryWait)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctrlkit-webhook-canary-", Labels: map[string]string{canaryLabel: canaryValue(config)}}}
	name := canaryName(config)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := errors.New("the canary was admitted without a call")
	inForce := false // an answer named the canary webhook: the configuration is in force
	for {
		_, err := kube.CoreV1().ConfigMaps(canaryNamespace).Create(ctx, cm, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err != nil && strings.Contains(err.Error(), name) && (!reached || strings.Contains(err.Error(), canaryReached)):
			return nil
		case apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "admission webhook"):
			// RBAC, not admission: the canary cannot tell.
			return fmt.Errorf("webhook: checking that the API server calls %s takes a dry-run create of a ConfigMap in %s: %w",
				config, canaryNamespace, err)
		case err != nil && ctx.Err() != nil:
			// Our own deadline cut the request: not an answer, and not to
			// hide the last one (on a loaded server, the one that said the
			// configuration is in force).
		case err != nil:
			last = err // another webhook's answer, a server busy: try again
			inForce = inForce || strings.Contains(err.Error(), name)
		}
		select {
		case <-ctx.Done():
			if reached && inForce {
				return fmt.Errorf("webhook: the API server's calls to the webhooks of %s did not reach this server within %s "+
					"(an address it cannot reach, a certificate it does not trust); last answer to the canary: %v: %w",
					config, canaryWait, last, context.Cause(ctx))
			}
			return fmt.Errorf("webhook: the API server did not call the webhooks of %s within %s (it picks configurations "+
				"up from an informer); last answer to the canary: %v: %w", config, canaryWait, last, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// Uninstall deletes the webhook configurations Install wrote (those of
// Options.Name); one already gone is not an error. CRDs keep their
// conversion webhook: without it, the API server could not serve their
// other versions.
func (s *Server) Uninstall(ctx context.Context, cfg *rest.Config) error {
	kube, _, err := oneShotClients(cfg)
	if err != nil {
		return err
	}
	adm := kube.AdmissionregistrationV1()
	var errs []error
	for _, del := range []func() error{
		func() error {
			return adm.ValidatingWebhookConfigurations().Delete(ctx, s.configName(false), metav1.DeleteOptions{})
		},
		func() error {
			return adm.MutatingWebhookConfigurations().Delete(ctx, s.configName(true), metav1.DeleteOptions{})
		},
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("webhook: uninstall: %w", err))
		}
	}
	return errors.Join(errs...)
}

// oneShotClients returns a clientset and its HTTP client for cfg, whose
// connections close after each request: Install's few requests leave no
// connection (nor its goroutines) behind, and share no transport with the
// caller's clients.
func oneShotClients(cfg *rest.Config) (*kubernetes.Clientset, *http.Client, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Transport = &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	kube, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, nil, fmt.Errorf("webhook: %w", err)
	}
	return kube, hc, nil
}

// configClient is the part of a webhook configuration client upsert uses.
type configClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// upsert creates obj, or replaces the one of its name.
func upsert[T interface {
	*admissionregistrationv1.ValidatingWebhookConfiguration | *admissionregistrationv1.MutatingWebhookConfiguration
	metav1.Object
}](ctx context.Context, c configClient[T], obj T) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return wrapInstall(obj.GetName(), err)
	}
	cur, err := c.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return wrapInstall(obj.GetName(), err)
	}
	obj.SetResourceVersion(cur.GetResourceVersion())
	_, err = c.Update(ctx, obj, metav1.UpdateOptions{})
	return wrapInstall(obj.GetName(), err)
}

func wrapInstall(name string, err error) error {
	if err != nil {
		return fmt.Errorf("webhook: writing %s: %w", name, err)
	}
	return nil
}

// installConversions sets the conversion webhook of each converted kind's
// CRD with a merge patch of its spec.conversion.
func (s *Server) installConversions(ctx context.Context, cfg *rest.Config, hc *http.Client, cc ClientConfig, mapper meta.RESTMapper) error {
	s.mu.Lock()
	var hubs []schema.GroupVersionKind
	for _, c := range s.conv {
		hubs = append(hubs, c.hub)
	}
	s.mu.Unlock()
	if len(hubs) == 0 {
		return nil
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return err
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	client, err := cc.webhookClientConfig(ConvertPath)
	if err != nil {
		return err
	}
	for _, hub := range hubs {
		gvr, err := resourceOf(hub, mapper)
		if err != nil {
			return err
		}
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"conversion": map[string]any{
			"strategy": "Webhook",
			"webhook":  map[string]any{"clientConfig": client, "conversionReviewVersions": []string{"v1"}},
		}}})
		if err != nil {
			return err
		}
		name := gvr.Resource + "." + gvr.Group
		if _, err := crds.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("webhook: pointing CRD %s at %s: %w", name, ConvertPath, err)
		}
	}
	return nil
}
