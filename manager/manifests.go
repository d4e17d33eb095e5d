package manager

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/ctrlkit/ctrlkit/internal/program"
	"github.com/ctrlkit/ctrlkit/webhook"
)

// ManifestOptions say as what and where a program runs in a cluster, for
// Manifests. The zero value means the defaults, but for Image.
type ManifestOptions struct {
	// Name names the ServiceAccount, the roles and bindings, the
	// Deployment, the Service and the webhook certificate. Default: the
	// program's name.
	Name string
	// Namespace is where they live; the first manifest makes it. Default:
	// Name + "-system".
	Namespace string
	// Image is the program's container image. Required.
	Image string
	// Args are more arguments for the program, after those Manifests
	// sets (a later flag wins).
	Args []string
	// CertManager has cert-manager issue the webhook server's certificate
	// (a self-signed Issuer and a Certificate whose Secret the Deployment
	// mounts; cert-manager injects the authority into the configurations
	// and CRDs it annotates) instead of the manager (WebhookCerts).
	CertManager bool
	// WebhookNamespaceSelector limits the admission webhooks to the objects
	// of the namespaces it selects. Default: every namespace but
	// kube-system, and, for the webhooks of Kubernetes' own kinds, but
	// Namespace too, so that a webhook that cannot be called (the program
	// down, its failure policy Fail) neither blocks the cluster's own
	// writes nor the program's start (its Pod, the kube-root-ca.crt
	// ConfigMap its Pod mounts); an empty selector selects every namespace.
	// Narrow a webhook further by object with webhook.ObjectSelector.
	WebhookNamespaceSelector *metav1.LabelSelector
	// Replicas is the Deployment's. Default: 1. With more, a
	// PodDisruptionBudget lets a drain take one at a time: the others go
	// on serving the webhooks, and one of them takes the lead at once.
	Replicas int32
	// MemoryLimit is the container's memory limit, a quantity such as
	// "256Mi": the kubelet ends the container when it uses more, and
	// Main sets Go's soft memory limit to nine tenths of it, so the
	// collector works harder before that happens rather than after.
	// Size it to the cache: the objects the informers hold, about twice
	// that for the collector's headroom, and some 30 MiB for the
	// program. Default: no limit (the request, 64Mi, still holds).
	MemoryLimit string
}

// Paths and ports of the manifests' Deployment.
const (
	manifestCacheDir = "/var/cache/ctrlkit"
	manifestCertDir  = "/var/run/ctrlkit/webhook-certs"
	manifestHealth   = 8081
	manifestMetrics  = 8443
	manifestWebhook  = 9443
)

// Manifests returns, as YAML documents, everything the program needs to
// run in a cluster, from what it registered on m (call it after the
// controllers and webhooks are set up; it makes no request):
//
//   - the Namespace, enforcing the restricted Pod Security Standard
//     (unless it is one of Kubernetes' own: default, kube-system,
//     kube-public, kube-node-lease);
//   - the CustomResourceDefinitions of Options.CRDs, each with its
//     conversion webhook set when the program converts its kind;
//   - a ServiceAccount, and the ClusterRole it is bound to: get, list and
//     watch on every informer's resource (in every namespace for a
//     namespace set's kind and a WhenServed kind, whose namespaces are
//     known only while the program runs), update on the finalizers of a
//     controller's For resource when it Owns others (the owner reference
//     it sets blocks the owner's deletion, which a cluster may enforce as
//     kubebuilder's scaffold expects), patch on the kind of each
//     Finalizer (where its informers watch), and Options.Permissions (a
//     namespaced informer or permission goes into a Role of its namespace
//     instead), create and patch on events, get on the kube-system
//     namespace (whose UID ties the caches' snapshots to the cluster);
//   - the Role NAME-leader-election in Namespace, and its binding: get,
//     create and update on Leases, and, when the manager keeps the webhook
//     certificate, create on Secrets and get, list, update and watch on
//     its own (NAME-webhook-cert);
//   - a ClusterRole NAME-metrics-reader (get on /metrics): bind it to
//     whatever scrapes the metrics;
//   - a Deployment: Replicas (one by default; more get a
//     PodDisruptionBudget of one unavailable) with --leader-elect, probes on /healthz and
//     /readyz (--health-addr :8081), metrics over HTTPS to tokens the API
//     server vouches for (--metrics-addr :8443, with the TokenReview and
//     SubjectAccessReview create it needs), snapshots of the caches in an emptyDir
//     (--cache-dir) so a restarted container starts warm, non-root (UID
//     65532), read-only root filesystem, no privilege escalation, no
//     capability, seccomp RuntimeDefault, CPU and memory requests (and
//     a memory limit with MemoryLimit);
//   - a Service: metrics on 8443 and, with webhooks or conversions, port
//     443 to the webhook server's 9443;
//   - with webhooks or conversions: the webhook configurations (for every
//     namespace but kube-system, and Namespace for those of Kubernetes' own
//     kinds, unless WebhookNamespaceSelector says otherwise), and the
//     serving certificate kept by the manager in the Secret
//     NAME-webhook-cert (--webhook-cert-secret; WebhookCerts), with the
//     rights to keep it (above) and to write the authority into those
//     configurations and CRDs, by name (only the configurations the
//     program has: none of the mutating type when it registered no
//     mutating webhook); or, with CertManager, from cert-manager (a
//     self-signed Issuer and a Certificate whose Secret the Deployment
//     mounts; cert-manager injects the authority into the configurations
//     and CRDs it annotates). When the manager keeps the certificate, a
//     ValidatingAdmissionPolicy NAME-ca-bundle-only (and its binding)
//     lets the ServiceAccount change nothing of those configurations and
//     CRDs but their caBundle (RBAC's update is of the whole object): the
//     webhooks' and conversion's fields, the CRDs' spec, and the owner
//     references, finalizers, labels and annotations (status, and other
//     metadata the server keeps, aside). It needs Kubernetes 1.30 or later
//     (admissionregistration.k8s.io/v1), as the whole apply then does.
//
// Resources are named by the lower-case plural of their kinds (as the
// webhook configurations are). The debug page stays on loopback
// (--http-addr's default). The output is meant to be kept in git and
// patched with kustomize.
func (m *Manager) Manifests(o ManifestOptions) ([]byte, error) {
	if o.Image == "" {
		return nil, errors.New("manager: manifests need the program's image")
	}
	limit, err := memoryLimit(o.MemoryLimit)
	if err != nil {
		return nil, err
	}
	o.Name = cmp.Or(o.Name, program.Name())
	o.Namespace = cmp.Or(o.Namespace, o.Name+"-system")
	d := &manifestDocs{o: o, labels: map[string]string{"app.kubernetes.io/name": o.Name}, certName: o.Name + "-webhook-cert",
		svc: &admissionregistrationv1.ServiceReference{Namespace: o.Namespace, Name: o.Name}}
	if o.CertManager {
		d.injectCA = map[string]string{"cert-manager.io/inject-ca-from": o.Namespace + "/" + d.certName}
	}
	ns := d.meta(o.Namespace, "")
	if !slices.Contains([]string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic, corev1.NamespaceNodeLease},
		o.Namespace) { // Kubernetes' own namespaces hold Pods of others, which the standard could refuse
		ns.Labels = maps.Clone(ns.Labels)
		ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted" // what the Deployment's Pods meet
	}
	d.add("v1", "Namespace", &corev1.Namespace{ObjectMeta: ns})
	serving, converted := m.webhooks.Registered()
	crds, err := m.crdManifests(converted, d.svc, d.injectCA)
	if err != nil {
		return nil, err
	}
	for _, crd := range crds {
		d.add("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
	}
	d.add("v1", "ServiceAccount", &corev1.ServiceAccount{ObjectMeta: d.meta(o.Name, o.Namespace)})
	m.rbacManifests(d, crds, serving)
	d.add("apps/v1", "Deployment", deployment(o, d.meta(o.Name, o.Namespace), d.labels, serving, d.certName, limit))
	if o.Replicas > 1 {
		one := intstr.FromInt32(1)
		d.add("policy/v1", "PodDisruptionBudget", &policyv1.PodDisruptionBudget{ObjectMeta: d.meta(o.Name, o.Namespace),
			Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: d.labels}}})
	}
	ports := []corev1.ServicePort{{Name: "metrics", Port: manifestMetrics, TargetPort: intstr.FromString("metrics")}}
	if serving {
		ports = append(ports, corev1.ServicePort{Name: "webhook", Port: 443, TargetPort: intstr.FromString("webhook")})
	}
	d.add("v1", "Service", &corev1.Service{ObjectMeta: d.meta(o.Name, o.Namespace), Spec: corev1.ServiceSpec{
		Selector: d.labels, Ports: ports}})
	if serving {
		if err := m.webhookManifests(d); err != nil {
			return nil, err
		}
		if !o.CertManager {
			m.caBundleOnlyPolicy(d, crds)
		}
	}
	return d.yaml()
}

// manifestDocs are the manifests being written, and what they share.
type manifestDocs struct {
	o        ManifestOptions
	labels   map[string]string
	certName string                                    // the webhook certificate's Secret
	injectCA map[string]string                         // cert-manager's annotation, with CertManager
	svc      *admissionregistrationv1.ServiceReference // the program's Service
	docs     []any
}

func (d *manifestDocs) add(apiVersion, kind string, obj any) {
	d.docs = append(d.docs, typed{apiVersion, kind, obj})
}

func (d *manifestDocs) meta(name, ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: d.labels}
}

// yaml returns the documents, separated by "---".
func (d *manifestDocs) yaml() ([]byte, error) {
	var out bytes.Buffer
	for i, doc := range d.docs {
		b, err := yaml.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("manager: manifests: %w", err)
		}
		if i > 0 {
			out.WriteString("---\n")
		}
		out.Write(b)
	}
	return out.Bytes(), nil
}

// rbacManifests adds the ServiceAccount's roles and bindings (see
// Manifests).
func (m *Manager) rbacManifests(d *manifestDocs, crds []*apiextensionsv1.CustomResourceDefinition, serving bool) {
	o := d.o
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: o.Name, Namespace: o.Namespace}}
	cluster, namespaced := m.rbacRules(m.plurals())
	if serving && !o.CertManager { // the manager keeps the certificates (WebhookCerts)
		namespaced[o.Namespace] = append(namespaced[o.Namespace], // its own Secret only: create cannot name one
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{d.certName},
				Verbs: []string{"get", "list", "update", "watch"}})
		cluster = append(cluster, m.injectionRules(crds)...)
	}
	d.add("rbac.authorization.k8s.io/v1", "ClusterRole", &rbacv1.ClusterRole{ObjectMeta: d.meta(o.Name, ""), Rules: cluster})
	d.add("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", &rbacv1.ClusterRoleBinding{ObjectMeta: d.meta(o.Name, ""),
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: o.Name}, Subjects: subject})
	d.add("rbac.authorization.k8s.io/v1", "ClusterRole", &rbacv1.ClusterRole{ObjectMeta: d.meta(o.Name+"-metrics-reader", ""),
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}})
	namespaced[o.Namespace] = append(namespaced[o.Namespace], rbacv1.PolicyRule{
		APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}})
	for _, ns := range slices.Sorted(maps.Keys(namespaced)) {
		name := o.Name
		if ns == o.Namespace {
			name = o.Name + "-leader-election"
		}
		d.add("rbac.authorization.k8s.io/v1", "Role", &rbacv1.Role{ObjectMeta: d.meta(name, ns), Rules: namespaced[ns]})
		d.add("rbac.authorization.k8s.io/v1", "RoleBinding", &rbacv1.RoleBinding{ObjectMeta: d.meta(name, ns),
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name}, Subjects: subject})
	}
}

// injectionRules are the rights WebhookCerts needs to write the authority
// into the program's webhook configurations and the converted kinds' CRDs,
// by name: only the configurations the program has (a validating one, a
// mutating one), none for a program that only converts.
func (m *Manager) injectionRules(crds []*apiextensionsv1.CustomResourceDefinition) []rbacv1.PolicyRule {
	var rules []rbacv1.PolicyRule
	for _, h := range m.injectionHooks() {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"},
			Resources: []string{h.resource}, ResourceNames: []string{h.name}, Verbs: []string{"get", "list", "update", "watch"}})
	}
	if crdNames := conversionCRDs(crds); len(crdNames) > 0 {
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{"apiextensions.k8s.io"},
			Resources: []string{"customresourcedefinitions"}, ResourceNames: crdNames, Verbs: []string{"get", "patch"}})
	}
	return rules
}

// injectionHook is a webhook configuration WebhookCerts writes the
// authority into: its resource and its name.
type injectionHook struct{ resource, name string }

// The resources of the two webhook configuration types.
const (
	validatingConfigurations = "validatingwebhookconfigurations"
	mutatingConfigurations   = "mutatingwebhookconfigurations"
)

// injectionHooks are the program's webhook configurations, as registered
// so far (webhook.Server.ConfigurationNames): those Manifests writes and
// WebhookCerts keeps.
func (m *Manager) injectionHooks() []injectionHook {
	validating, mutating := m.webhooks.ConfigurationNames()
	var hooks []injectionHook
	if validating != "" {
		hooks = append(hooks, injectionHook{validatingConfigurations, validating})
	}
	if mutating != "" {
		hooks = append(hooks, injectionHook{mutatingConfigurations, mutating})
	}
	return hooks
}

// conversionCRDs names the CRDs of crds with a conversion webhook, whose
// authority WebhookCerts writes.
func conversionCRDs(crds []*apiextensionsv1.CustomResourceDefinition) []string {
	var names []string
	for _, crd := range crds {
		if crd.Spec.Conversion != nil && crd.Spec.Conversion.Webhook != nil {
			names = append(names, crd.Name)
		}
	}
	return names
}

// notIn selects every namespace but those named.
func notIn(namespaces ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: corev1.LabelMetadataName,
		Operator: metav1.LabelSelectorOpNotIn, Values: slices.Compact(slices.Sorted(slices.Values(namespaces)))}}}
}

// webhookNamespaces returns cc with the namespaces of the webhooks the
// manifests print: set's if not nil, else every namespace but
// kube-system, and but own too for the webhooks of Kubernetes' own kinds
// (a Pod, a ConfigMap such as the kube-root-ca.crt every Pod mounts, a
// Secret or a ServiceAccount of the program refused while its webhook is
// down would keep it from starting; its own kinds' objects there are
// reviewed as anywhere).
func webhookNamespaces(cc webhook.ClientConfig, own string, set *metav1.LabelSelector) webhook.ClientConfig {
	if set != nil {
		cc.NamespaceSelector = set
		return cc
	}
	cc.NamespaceSelector = notIn(metav1.NamespaceSystem)
	cc.NamespaceSelectorFor = func(group string) *metav1.LabelSelector {
		if builtIn().IsGroupRegistered(group) {
			return notIn(metav1.NamespaceSystem, own)
		}
		return nil
	}
	return cc
}

// builtIn is a scheme of Kubernetes' own kinds only (client-go's shared
// scheme may have a program's own added to it).
var builtIn = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err) // client-go's own types: never
	}
	return s
})

// webhookManifests adds the webhook configurations, and cert-manager's
// Issuer and Certificate with CertManager.
func (m *Manager) webhookManifests(d *manifestDocs) error {
	o := d.o
	if o.CertManager {
		d.add("cert-manager.io/v1", "Issuer", map[string]any{"metadata": d.meta(o.Name+"-selfsigned", o.Namespace),
			"spec": map[string]any{"selfSigned": map[string]any{}}})
		host := o.Name + "." + o.Namespace + ".svc"
		d.add("cert-manager.io/v1", "Certificate", map[string]any{"metadata": d.meta(d.certName, o.Namespace),
			"spec": map[string]any{"secretName": d.certName, "dnsNames": []string{host, host + ".cluster.local"},
				"issuerRef": map[string]any{"kind": "Issuer", "name": o.Name + "-selfsigned"}}})
	}
	vwc, mwc, err := m.webhooks.Configurations(webhookNamespaces(webhook.ClientConfig{Service: d.svc}, o.Namespace,
		o.WebhookNamespaceSelector), m.plurals())
	if err != nil {
		return fmt.Errorf("manager: manifests: %w", err)
	}
	if mwc != nil {
		mwc.Annotations, mwc.Labels = d.injectCA, d.labels // nil without cert-manager
		d.add("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", mwc)
	}
	if vwc != nil {
		vwc.Annotations, vwc.Labels = d.injectCA, d.labels
		d.add("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", vwc)
	}
	return nil
}

// caBundleOnlyPolicy adds a ValidatingAdmissionPolicy, and its binding,
// that lets the program's ServiceAccount change nothing but the authority
// (caBundle) of the webhook configurations and conversion CRDs its role
// lets it update: RBAC grants a whole object or nothing, and a process
// that could rewrite its own webhook configuration (its rules, selectors,
// URL) could have every object of the cluster sent to it.
func (m *Manager) caBundleOnlyPolicy(d *manifestDocs, crds []*apiextensionsv1.CustomResourceDefinition) {
	o := d.o
	user := "system:serviceaccount:" + o.Namespace + ":" + o.Name
	// same is a CEL test that each field of a and b is equal or absent in
	// both.
	same := func(a, b string, fields ...string) string {
		var tests []string
		for _, f := range fields {
			tests = append(tests, fmt.Sprintf("(has(%[1]s.%[3]s) ? has(%[2]s.%[3]s) && %[1]s.%[3]s == %[2]s.%[3]s : !has(%[2]s.%[3]s))", a, b, f))
		}
		return strings.Join(tests, " && ")
	}
	// The metadata that would let it have the object deleted (an owner
	// reference to an owner that is gone), kept (a finalizer) or read
	// otherwise (labels, annotations) stays as it is too.
	meta := same("object.metadata", "oldObject.metadata", "ownerReferences", "finalizers", "labels", "annotations")
	hook := same("w", "o", "clientConfig.url", "clientConfig.service", "rules", "failurePolicy", "matchPolicy",
		"namespaceSelector", "objectSelector", "sideEffects", "timeoutSeconds", "admissionReviewVersions", "matchConditions",
		"reinvocationPolicy")
	hooks := `request.resource.group != "admissionregistration.k8s.io" || (` + meta + ` && ` +
		`has(object.webhooks) == has(oldObject.webhooks) && (!has(object.webhooks) || ` +
		`object.webhooks.size() == oldObject.webhooks.size() && ` +
		`object.webhooks.all(w, oldObject.webhooks.exists(o, o.name == w.name && ` + hook + `))))`
	spec := same("object.spec", "oldObject.spec", "group", "names", "scope", "versions", "preserveUnknownFields",
		"conversion.strategy")
	conversion := same("object.spec.conversion.webhook", "oldObject.spec.conversion.webhook",
		"clientConfig.url", "clientConfig.service", "conversionReviewVersions")
	crdRule := `request.resource.group != "apiextensions.k8s.io" || (has(object.spec.conversion) && has(oldObject.spec.conversion) && ` +
		`(has(object.spec.conversion.webhook) == has(oldObject.spec.conversion.webhook)) && ` +
		`(!has(object.spec.conversion.webhook) || (` + conversion + `)) && ` + spec + ` && ` + meta + `)`
	rule := func(group string, names []string, resources ...string) admissionregistrationv1.NamedRuleWithOperations {
		return admissionregistrationv1.NamedRuleWithOperations{ResourceNames: names,
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"*"}, Resources: resources}}}
	}
	var rules []admissionregistrationv1.NamedRuleWithOperations
	for _, h := range m.injectionHooks() {
		rules = append(rules, rule("admissionregistration.k8s.io", []string{h.name}, h.resource))
	}
	if crdNames := conversionCRDs(crds); len(crdNames) > 0 {
		rules = append(rules, rule("apiextensions.k8s.io", crdNames, "customresourcedefinitions"))
	}
	if len(rules) == 0 { // nothing the role lets it update: no rule (none would match every name)
		return
	}
	fail := admissionregistrationv1.Fail
	name := o.Name + "-ca-bundle-only"
	d.add("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: d.meta(name, ""), Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: rules},
			MatchConditions:  []admissionregistrationv1.MatchCondition{{Name: "the-program", Expression: fmt.Sprintf("request.userInfo.username == %q", user)}},
			Validations: []admissionregistrationv1.Validation{
				{Expression: hooks, Message: user + " may change the caBundle of its webhook configurations, nothing else"},
				{Expression: crdRule, Message: user + " may change the caBundle of its CRDs' conversion webhooks, nothing else"},
			},
		}})
	d.add("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: d.meta(name, ""), Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}})
}

// typed is a manifest with its API version and kind first.
type typed struct {
	apiVersion, kind string
	obj              any
}

// MarshalJSON writes apiVersion and kind, then the object's own fields.
func (t typed) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(t.obj)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	delete(fields, "status")
	if md, ok := fields["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	fields["apiVersion"], fields["kind"] = t.apiVersion, t.kind
	return json.Marshal(fields) // keys sorted: apiVersion, kind, metadata, then the rest
}

// mustQuantity parses a quantity written in this file.
func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// rbacRules returns the rules the program's informers and
// Options.Permissions need: cluster-wide ones, and by namespace those
// limited to one.
func (m *Manager) rbacRules(p plurals) (cluster []rbacv1.PolicyRule, namespaced map[string][]rbacv1.PolicyRule) {
	type target struct{ ns, group, resource string }
	verbs := map[target]map[string]bool{}
	grant := func(t target, vs ...string) {
		if verbs[t] == nil {
			verbs[t] = map[string]bool{}
		}
		for _, v := range vs {
			verbs[t][v] = true
		}
	}
	m.mu.Lock()
	scopes := map[string]string{} // informer name → its namespace
	for _, e := range m.informers {
		gvr := p.resource(e.gvk)
		grant(target{e.scope.Namespace, gvr.Group, gvr.Resource}, "get", "list", "watch")
		scopes[e.name] = e.scope.Namespace
	}
	// What runs informers later: a namespace set's kind in namespaces
	// known only while it runs, and a WhenServed kind in scopes its setup
	// chooses; both are granted in every namespace.
	for _, gvk := range m.laterKindsLocked() {
		gvr := p.resource(gvk)
		grant(target{"", gvr.Group, gvr.Resource}, "get", "list", "watch")
	}
	// A controller that owns objects sets itself as their controller
	// (apply.ControllerReference, SetControllerReference) with
	// blockOwnerDeletion, which a cluster enforcing it
	// (OwnerReferencesPermissionEnforcement, as OpenShift does) allows only
	// to who may update the owner's finalizers.
	var owners []Source // the For sources of controllers that own objects
	for _, c := range m.controllers {
		if slices.ContainsFunc(c.sources, func(s Source) bool { return s.role() == roleOwns }) {
			owners = append(owners, c.sources[slices.IndexFunc(c.sources, Source.isFor)])
		}
	}
	fin := append(m.finalizerPermissions(p), m.providerPermissions...) // a Finalizer's patches, the fleets' providers' reads
	m.mu.Unlock()
	for _, s := range owners {
		gvk, err := s.kind(m) // (kind takes m.mu)
		if err != nil {
			continue
		}
		gvr := p.resource(gvk)
		namespaces, set := s.setNamespaces() // a set's, where its informers' grants are
		if !set {
			namespaces = []string{scopes[s.informerName()]}
		}
		for _, ns := range namespaces {
			grant(target{ns, gvr.Group, gvr.Resource + "/finalizers"}, "update")
		}
	}
	for _, p := range append(fin, m.opts.Permissions...) {
		r := p.Resource
		if p.Subresource != "" {
			r += "/" + p.Subresource
		}
		grant(target{p.Namespace, p.Group, r}, p.Verb)
	}
	grant(target{"", "", "events"}, "create", "patch")
	grant(target{"", "authentication.k8s.io", "tokenreviews"}, "create")        // the secured metrics' reviews
	grant(target{"", "authorization.k8s.io", "subjectaccessreviews"}, "create") // (Options.MetricsAddr)
	grant(target{"", "events.k8s.io", "events"}, "create", "patch")
	namespaced = map[string][]rbacv1.PolicyRule{}
	keys := slices.SortedFunc(maps.Keys(verbs), func(a, b target) int {
		return strings.Compare(a.ns+"\x00"+a.group+"\x00"+a.resource, b.ns+"\x00"+b.group+"\x00"+b.resource)
	})
	for _, t := range keys {
		rule := rbacv1.PolicyRule{APIGroups: []string{t.group}, Resources: []string{t.resource},
			Verbs: slices.Sorted(maps.Keys(verbs[t]))}
		if t.ns == "" {
			cluster = append(cluster, rule)
		} else {
			namespaced[t.ns] = append(namespaced[t.ns], rule)
		}
	}
	// The caches' snapshots (--cache-dir) are tied to the cluster by the
	// UID of its kube-system namespace: reading that one namespace only.
	cluster = append(cluster, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"},
		ResourceNames: []string{"kube-system"}, Verbs: []string{"get"}})
	return cluster, namespaced
}

// crdManifests returns the CRDs of Options.CRDs, each converted kind's
// with its conversion webhook at svc and the CA injection annotation.
func (m *Manager) crdManifests(converted []schema.GroupKind, svc *admissionregistrationv1.ServiceReference,
	injectCA map[string]string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	if m.opts.CRDs == nil {
		return nil, nil
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(m.opts.CRDs, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || (path.Ext(p) != ".yaml" && path.Ext(p) != ".yml") {
			return err
		}
		b, err := fs.ReadFile(m.opts.CRDs, p)
		if err != nil {
			return err
		}
		for _, doc := range bytes.Split(b, []byte("\n---")) {
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := yaml.UnmarshalStrict(doc, crd); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if crd.Kind != "CustomResourceDefinition" {
				return fmt.Errorf("%s: a %s, want CustomResourceDefinitions only", p, crd.Kind)
			}
			gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
			if slices.Contains(converted, gk) {
				path := webhook.ConvertPath
				port := int32(443)
				crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
					Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
						ClientConfig: &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{
							Namespace: svc.Namespace, Name: svc.Name, Path: &path, Port: &port}}}}
				if len(injectCA) > 0 && crd.Annotations == nil {
					crd.Annotations = map[string]string{}
				}
				maps.Copy(crd.Annotations, injectCA)
			}
			crds = append(crds, crd)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("manager: manifests: the CRDs: %w", err)
	}
	return crds, nil
}

// deployment is the program's Deployment (see Manifests).
func deployment(o ManifestOptions, om metav1.ObjectMeta, labels map[string]string, serving bool, certName string,
	limits corev1.ResourceList) *appsv1.Deployment {
	one, no, yes, uid, grace := int32(1), false, true, int64(65532), int64(45)
	args := []string{"--leader-elect", "--leader-elect-namespace=" + o.Namespace,
		fmt.Sprintf("--health-addr=:%d", manifestHealth), fmt.Sprintf("--metrics-addr=:%d", manifestMetrics),
		"--cache-dir=" + manifestCacheDir}
	ports := []corev1.ContainerPort{{Name: "health", ContainerPort: manifestHealth}, {Name: "metrics", ContainerPort: manifestMetrics}}
	mounts := []corev1.VolumeMount{{Name: "cache", MountPath: manifestCacheDir}}
	volumes := []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	switch {
	case serving && o.CertManager:
		args = append(args, fmt.Sprintf("--webhook-addr=:%d", manifestWebhook), "--webhook-cert-dir="+manifestCertDir)
		mounts = append(mounts, corev1.VolumeMount{Name: "webhook-certs", MountPath: manifestCertDir, ReadOnly: true})
		volumes = append(volumes, corev1.Volume{Name: "webhook-certs",
			VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: certName}}})
	case serving:
		host := o.Name + "." + o.Namespace + ".svc"
		args = append(args, fmt.Sprintf("--webhook-addr=:%d", manifestWebhook), "--webhook-cert-secret="+o.Namespace+"/"+certName,
			"--webhook-cert-hosts="+host+","+host+".cluster.local")
	}
	if serving {
		ports = append(ports, corev1.ContainerPort{Name: "webhook", ContainerPort: manifestWebhook})
	}
	probe := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path,
			Port: intstr.FromString("health")}}, PeriodSeconds: 10}
	}
	replicas := max(o.Replicas, one)
	return &appsv1.Deployment{ObjectMeta: om, Spec: appsv1.DeploymentSpec{
		Replicas: &replicas,
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			ServiceAccountName:            o.Name,
			TerminationGracePeriodSeconds: &grace, // above the controllers' 30s shutdown bound
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "manager", Image: o.Image, Args: append(args, o.Args...), Ports: ports,
				LivenessProbe: probe("/healthz"), ReadinessProbe: probe("/readyz"),
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: mustQuantity("10m"), corev1.ResourceMemory: mustQuantity(manifestMemoryRequest)}, Limits: limits},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				VolumeMounts: mounts,
			}},
			Volumes: volumes,
		}},
	}}
}

// manifestMemoryRequest is the Deployment's memory request.
const manifestMemoryRequest = "64Mi"

// memoryLimit is ManifestOptions.MemoryLimit as the container's limits:
// none for "", an error for a quantity that does not parse or is below
// the request.
func memoryLimit(s string) (corev1.ResourceList, error) {
	if s == "" {
		return nil, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return nil, fmt.Errorf("manager: manifests: memory limit %q: %w", s, err)
	}
	if q.Cmp(mustQuantity(manifestMemoryRequest)) < 0 {
		return nil, fmt.Errorf("manager: manifests: memory limit %s is below the request, %s", s, manifestMemoryRequest)
	}
	return corev1.ResourceList{corev1.ResourceMemory: q}, nil
}

// plurals names each kind's resource: a CRD's of Options.CRDs by its
// spec.names.plural, any other kind by the usual guess (the lower-case
// plural). A kind such as Mesh, whose CRD says meshes, is not guessed.
type plurals map[schema.GroupKind]string

// plurals returns the plurals of Options.CRDs' kinds; CRDs that do not
// parse are left to Manifests to report.
func (m *Manager) plurals() plurals {
	out := plurals{}
	crds, _ := m.crdManifests(nil, nil, nil)
	for _, crd := range crds {
		out[schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}] = crd.Spec.Names.Plural
	}
	return out
}

// resource returns gvk's resource.
func (p plurals) resource(gvk schema.GroupVersionKind) schema.GroupVersionResource {
	if plural, ok := p[gvk.GroupKind()]; ok {
		return gvk.GroupVersion().WithResource(plural)
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvk)
	return gvr
}

// RESTMapping makes plurals a meta.RESTMapper for the webhook
// configurations (the only method they call).
func (p plurals) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	v := ""
	if len(versions) > 0 {
		v = versions[0]
	}
	gvk := gk.WithVersion(v)
	return &meta.RESTMapping{Resource: p.resource(gvk), GroupVersionKind: gvk}, nil
}

func (p plurals) KindFor(schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return schema.GroupVersionKind{}, errors.New("manager: plurals map kinds to resources only")
}
func (p plurals) KindsFor(schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return nil, errors.New("manager: plurals map kinds to resources only")
}
func (p plurals) ResourceFor(schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return schema.GroupVersionResource{}, errors.New("manager: plurals map kinds to resources only")
}
func (p plurals) ResourcesFor(schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return nil, errors.New("manager: plurals map kinds to resources only")
}
func (p plurals) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	m, err := p.RESTMapping(gk, versions...)
	return []*meta.RESTMapping{m}, err
}
func (p plurals) ResourceSingularizer(resource string) (string, error) {
	return "", errors.New("manager: plurals map kinds to resources only")
}
