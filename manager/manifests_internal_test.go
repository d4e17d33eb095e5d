package manager

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/internal/testapi"
	testapiv1 "github.com/ctrlkit/ctrlkit/internal/testapi/v1"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/webhook"
)

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object}}
`

// A program with webhooks gets the Service, the cert-manager Issuer and
// Certificate, its configurations annotated for the CA, and the Secret
// mounted where --webhook-cert-dir says; a CRD of a kind it converts gets
// its conversion webhook; informers and permissions make the roles.
func TestManifests_followWhatTheProgramRegistered(t *testing.T) {
	m, err := New(&rest.Config{Host: "https://cluster.invalid"}, Options{HTTPAddr: "0", Logger: slog.New(slog.DiscardHandler),
		CRDs: fstest.MapFS{"crd/example.com_widgets.yaml": {Data: []byte(widgetCRD)}, "crd/README.md": {Data: []byte("not a CRD")},
			"crd/example.com_meshes.yaml": {Data: []byte(strings.NewReplacer("widgets", "meshes", "Widget", "Mesh", "widget", "mesh").Replace(widgetCRD))}},
		Permissions: []Permission{{Verb: "patch", Resource: "secrets"}, {Verb: "update", Group: "apps", Resource: "deployments", Subresource: "status", Namespace: "web"}},
		AddToScheme: []func(*runtime.Scheme) error{testapi.AddToScheme}})
	if err != nil {
		t.Fatal(err)
	}
	Informer[*corev1.ConfigMap](m, Scope{})
	Informer[*corev1.Secret](m, Scope{Namespace: "web"})
	quota := metav1.LabelSelector{MatchLabels: map[string]string{"example.com/quota": "on"}}
	if err := webhook.AddValidator(m.Webhooks(), webhook.Validator[*corev1.ConfigMap]{
		Create: func(context.Context, *corev1.ConfigMap) (webhook.Warnings, error) { return nil, nil }}, webhook.ObjectSelector(quota)); err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddValidator(m.Webhooks(), webhook.Validator[*testapiv1.Gadget]{
		Create: func(context.Context, *testapiv1.Gadget) (webhook.Warnings, error) { return nil, nil }}); err != nil {
		t.Fatal(err)
	}
	nop := controller.ReconcileFunc[object.ObjectName](func(context.Context, object.ObjectName) (controller.Result, error) {
		return controller.Result{}, nil
	})
	cms := Informer[*corev1.ConfigMap](m, Scope{})
	owned := Informer[*corev1.Secret](m, Scope{Namespace: "web"})
	if _, err := NewController(m, "owner", nop, ControllerOptions{}, For(cms), Owns(owned)); err != nil {
		t.Fatal(err)
	}
	deployments, err := InNamespaces[*appsv1.Deployment](m, Scope{}, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewController(m, "set-owner", nop, ControllerOptions{}, deployments.For(), Owns(Informer[*corev1.Pod](m, Scope{Namespace: "a"}))); err != nil {
		t.Fatal(err)
	}
	out, err := m.Manifests(ManifestOptions{Name: "op", Image: "example.com/op:v1"})
	if err != nil {
		t.Fatal(err)
	}
	// A controller that owns objects may update its For kind's finalizers
	// (its owner references block the owner's deletion); the webhook
	// leaves kube-system and the operator's own namespace out, and sees
	// only the objects its selector selects.
	var role rbacv1.ClusterRole
	roles := map[string]rbacv1.Role{} // by namespace
	var hooks admissionregistrationv1.ValidatingWebhookConfiguration
	for _, doc := range strings.Split(string(out), "---\n") {
		switch {
		case strings.Contains(doc, "kind: ClusterRole\n") && strings.Contains(doc, "\n  name: op\n"):
			err = yaml.Unmarshal([]byte(doc), &role)
		case strings.HasPrefix(doc, "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n"):
			var r rbacv1.Role
			err = yaml.Unmarshal([]byte(doc), &r)
			roles[r.Namespace] = r
		case strings.Contains(doc, "kind: ValidatingWebhookConfiguration\n"):
			err = yaml.Unmarshal([]byte(doc), &hooks)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	finalizers := func(rules []rbacv1.PolicyRule, resource string) bool {
		return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
			return slices.Equal(r.Resources, []string{resource + "/finalizers"}) && slices.Equal(r.Verbs, []string{"update"})
		})
	}
	if !finalizers(role.Rules, "configmaps") || finalizers(role.Rules, "deployments") {
		t.Errorf("the ClusterRole's rules %+v; want update on configmaps/finalizers, and none on deployments/finalizers", role.Rules)
	}
	if !finalizers(roles["a"].Rules, "deployments") || !finalizers(roles["b"].Rules, "deployments") {
		t.Errorf("the Roles of a and b %+v; want update on deployments/finalizers in both (the set's namespaces)", roles)
	}
	byName := map[string]admissionregistrationv1.ValidatingWebhook{}
	for _, w := range hooks.Webhooks {
		byName[w.Name] = w
	}
	cm, gadget := byName["validate.v1.configmaps.core"], byName["validate.v1.gadgets."+testapiv1.SchemeGroupVersion.Group]
	if len(byName) != 2 || !reflect.DeepEqual(cm.NamespaceSelector, notIn("kube-system", "op-system")) ||
		!reflect.DeepEqual(cm.ObjectSelector, &quota) {
		t.Errorf("webhooks %+v; want the ConfigMaps' for every namespace but kube-system and op-system, objects selected by %v",
			hooks.Webhooks, quota)
	}
	if !reflect.DeepEqual(gadget.NamespaceSelector, notIn("kube-system")) || gadget.ObjectSelector != nil {
		t.Errorf("the program's own kind's webhook %+v; want it for every namespace but kube-system, the program's own included", gadget)
	}
	if strings.Contains(string(out), "PodDisruptionBudget") || !strings.Contains(string(out), "replicas: 1\n") {
		t.Error("one replica by default, with no PodDisruptionBudget")
	}
	three, err := m.Manifests(ManifestOptions{Name: "op", Image: "example.com/op:v1", Replicas: 3})
	if err != nil || !strings.Contains(string(three), "replicas: 3\n") || !strings.Contains(string(three), "kind: PodDisruptionBudget") ||
		!strings.Contains(string(three), "maxUnavailable: 1") {
		t.Errorf("three replicas: no Deployment of 3 and PodDisruptionBudget of one unavailable (%v)", err)
	}
	if !strings.Contains(string(out), "pod-security.kubernetes.io/enforce: restricted") {
		t.Error("the Namespace does not enforce the restricted Pod Security Standard")
	}
	if shared, err := m.Manifests(ManifestOptions{Name: "op", Namespace: "default", Image: "example.com/op:v1"}); err != nil ||
		strings.Contains(string(shared), "pod-security.kubernetes.io/enforce") {
		t.Errorf("the default namespace, shared with others' Pods, labelled to enforce a standard (%v)", err)
	}
	if strings.Contains(string(out), "limits:") {
		t.Error("a memory limit by default")
	}
	limited, err := m.Manifests(ManifestOptions{Name: "op", Image: "example.com/op:v1", MemoryLimit: "256Mi"})
	if err != nil || !strings.Contains(string(limited), "limits:\n            memory: 256Mi\n") {
		t.Errorf("MemoryLimit 256Mi: no limit of 256Mi on the container (%v)", err)
	}
	for _, bad := range []string{"lots", "32Mi"} {
		if _, err := m.Manifests(ManifestOptions{Name: "op", Image: "example.com/op:v1", MemoryLimit: bad}); err == nil {
			t.Errorf("MemoryLimit %q (not a quantity, or below the 64Mi request) accepted", bad)
		}
	}
	every, err := m.Manifests(ManifestOptions{Name: "op", Image: "example.com/op:v1", WebhookNamespaceSelector: &metav1.LabelSelector{}})
	if err != nil || !strings.Contains(string(every), "namespaceSelector: {}") {
		t.Errorf("an empty WebhookNamespaceSelector (every namespace) is not in the manifests: %v", err)
	}
	var kinds []string
	for _, doc := range strings.Split(string(out), "---\n") {
		var d struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, d.Kind)
	}
	want := "Namespace CustomResourceDefinition CustomResourceDefinition ServiceAccount ClusterRole ClusterRoleBinding ClusterRole " +
		"Role RoleBinding Role RoleBinding Role RoleBinding Role RoleBinding " + // a, b (the set's), op-system, web
		"Deployment Service ValidatingWebhookConfiguration ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding"
	if strings.Join(kinds, " ") != want {
		t.Errorf("kinds:\n%s\nwant:\n%s", strings.Join(kinds, " "), want)
	}
	if strings.Contains(string(out), "cert-manager") || strings.Contains(string(out), "webhook-cert-dir") {
		t.Errorf("the manager keeps the certificates, yet the manifests name cert-manager or a certificate folder:\n%s", out)
	}
	for _, s := range []string{
		"namespace: op-system", "- --webhook-cert-secret=op-system/op-webhook-cert",
		"- --webhook-cert-hosts=op.op-system.svc,op.op-system.svc.cluster.local", "- --webhook-addr=:9443",
		"- validatingwebhookconfigurations", "- secrets",
		"name: op-leader-election", "- leases", "- configmaps", "- deployments/status", "namespace: web",
		"image: example.com/op:v1", "name: op-metrics-reader", "- /metrics", "- --metrics-addr=:8443", "- tokenreviews",
		"- subjectaccessreviews",
	} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the manifests lack %q", s)
		}
	}
	if strings.Contains(string(out), "creationTimestamp") || strings.Contains(string(out), "status:") {
		t.Errorf("the manifests carry server-set fields:\n%s", out)
	}
	// Only validating webhooks: the role and the policy name no mutating
	// configuration (a grant on one the program does not have would let
	// it rewrite a configuration someone else applies under that name).
	if strings.Contains(string(out), "mutatingwebhookconfigurations") || strings.Contains(string(out), m.webhooks.Options().Name+"-mutating") {
		t.Errorf("a program with only validating webhooks is granted its mutating configuration:\n%s", out)
	}

	// A CRD's plural is its own, not a guess: Mesh's is meshes.
	if r := m.plurals().resource(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Mesh"}); r.Resource != "meshes" {
		t.Errorf("Mesh's resource %q, want the CRD's plural, meshes", r.Resource)
	}

	// Conversion: the kind's CRD points at the Service's /convert.
	crds, err := m.crdManifests([]schema.GroupKind{{Group: "example.com", Kind: "Widget"}},
		&admissionregistrationv1.ServiceReference{Namespace: "op-system", Name: "op"}, map[string]string{"k": "v"})
	if err != nil || len(crds) != 2 {
		t.Fatalf("%d CRDs, %v; want 2", len(crds), err)
	}
	c := crds[1].Spec.Conversion
	if c == nil || c.Webhook == nil || c.Webhook.ClientConfig.Service.Name != "op" || *c.Webhook.ClientConfig.Service.Path != "/convert" ||
		crds[1].Annotations["k"] != "v" || crds[0].Spec.Conversion != nil {
		t.Errorf("conversion %+v, annotations %v; the other CRD's conversion %+v", c, crds[1].Annotations, crds[0].Spec.Conversion)
	}

	// With cert-manager instead: its Issuer and Certificate, the Secret
	// mounted, the configurations annotated for the authority.
	out, err = m.Manifests(ManifestOptions{Name: "op", Image: "example.com/op:v1", CertManager: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"kind: Issuer", "kind: Certificate", "cert-manager.io/inject-ca-from: op-system/op-webhook-cert",
		"secretName: op-webhook-cert", "- op.op-system.svc", "- --webhook-cert-dir=/var/run/ctrlkit/webhook-certs"} {
		if !strings.Contains(string(out), s) {
			t.Errorf("the cert-manager manifests lack %q", s)
		}
	}
	if strings.Contains(string(out), "webhook-cert-secret") || strings.Contains(string(out), "ValidatingAdmissionPolicy") {
		t.Error("the cert-manager manifests also have the manager keep the certificates, or limit its writes to them")
	}

	if _, err := m.Manifests(ManifestOptions{}); err == nil {
		t.Error("manifests without an image: no error")
	}
}

// A Finalizer patches its kind's objects: the role the manifests print
// grants patch where the manager's informers of that kind watch, or
// everywhere when none does.
func TestManifests_grantAFinalizerItsPatches(t *testing.T) {
	m, err := New(&rest.Config{Host: "https://cluster.invalid"}, Options{HTTPAddr: "0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	Informer[*corev1.ConfigMap](m, Scope{Namespace: "web"})
	Finalizer(m, "example.com/record", func(context.Context, *corev1.ConfigMap) error { return nil })
	Finalizer(m, "example.com/record", func(context.Context, *corev1.Secret) error { return nil })
	cluster, namespaced := m.rbacRules(m.plurals())
	has := func(rules []rbacv1.PolicyRule, resource string) bool {
		return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
			return slices.Equal(r.Resources, []string{resource}) && slices.Contains(r.Verbs, "patch")
		})
	}
	if !has(namespaced["web"], "configmaps") || has(cluster, "configmaps") {
		t.Errorf("patch on configmaps: in web %v, cluster-wide %v; want it in web alone, where the informer watches",
			namespaced["web"], cluster)
	}
	if !has(cluster, "secrets") {
		t.Errorf("patch on secrets, which no informer watches: not cluster-wide in %v", cluster)
	}
}

// A program with only a mutating webhook may write the authority into its
// mutating configuration alone: the ClusterRole and the policy that keeps
// it to the bundle name that one, by name, and no validating one.
func TestManifests_grantOnlyTheWebhookConfigurationsTheProgramHas(t *testing.T) {
	m, err := New(&rest.Config{Host: "https://cluster.invalid"}, Options{HTTPAddr: "0", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := webhook.AddDefaulter(m.Webhooks(), func(context.Context, *corev1.ConfigMap) error { return nil }); err != nil {
		t.Fatal(err)
	}
	out, err := m.Manifests(ManifestOptions{Name: "op", Image: "example.com/op:v1"})
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	for _, doc := range strings.Split(string(out), "---\n") {
		switch {
		case strings.Contains(doc, "kind: ClusterRole\n") && strings.Contains(doc, "\n  name: op\n"):
			err = yaml.Unmarshal([]byte(doc), &role)
		case strings.Contains(doc, "kind: ValidatingAdmissionPolicy\n"):
			err = yaml.Unmarshal([]byte(doc), &policy)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var granted []string
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "admissionregistration.k8s.io") {
			granted = append(granted, strings.Join(r.Resources, ",")+"/"+strings.Join(r.ResourceNames, ","))
		}
	}
	mutating := m.webhooks.Options().Name + "-mutating" // the webhook server's name: the program's by default
	if want := []string{"mutatingwebhookconfigurations/" + mutating}; !slices.Equal(granted, want) {
		t.Errorf("the ClusterRole grants %v on webhook configurations; want %v", granted, want)
	}
	if policy.Spec.MatchConstraints == nil || len(policy.Spec.MatchConstraints.ResourceRules) != 1 ||
		!slices.Equal(policy.Spec.MatchConstraints.ResourceRules[0].ResourceNames, []string{mutating}) ||
		!slices.Equal(policy.Spec.MatchConstraints.ResourceRules[0].Resources, []string{"mutatingwebhookconfigurations"}) {
		t.Errorf("the ca-bundle-only policy matches %+v; want %s's updates alone", policy.Spec.MatchConstraints, mutating)
	}
	if v, mu := m.webhooks.ConfigurationNames(); v != "" || mu != mutating {
		t.Errorf("ConfigurationNames() = %q, %q; want \"\", %q", v, mu, mutating)
	}
}
