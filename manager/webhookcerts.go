package manager

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/internal/certs"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
)

// WebhookCerts makes the manager keep its webhook server's certificates in
// a Secret, without cert-manager: a certificate authority and a serving
// certificate it signs for Hosts. Every replica serves the Secret's current
// certificate (read again when the Secret changes, without a restart); any
// replica makes the Secret when it is missing and renews what is about to
// expire (the API server's optimistic concurrency makes one of them win),
// and writes the authority into the caBundle of the server's webhook
// configurations (NAME-validating, NAME-mutating: those of the types the
// program registered webhooks of) and of the CRDs of the
// kinds it converts, whenever they lack it.
//
// The serving certificate lasts 90 days and is renewed with 30 left, by
// the same authority: the bundle does not change, no request is refused.
// The authority lasts 10 years and is renewed with a third left: the new
// one joins the bundle at once, beside the old one, and signs serving
// certificates only once a pass found the new bundle in every
// configuration and CRD the manager keeps, and CASettle passed (time for
// the API server to read it); the old one leaves the bundle when it
// expires. The configurations are checked at every pass: when the Secret
// changes, when a configuration changes (one applied again without its
// bundle has it back at once), and every minute (a CRD's).
type WebhookCerts struct {
	// Secret is where the certificates are kept (a kubernetes.io/tls
	// Secret: tls.crt and tls.key the serving pair, ca.crt the bundle,
	// ca.key the authority's key). Zero: off, the server reads
	// Options.Webhook.CertDir.
	Secret object.ObjectName
	// Hosts are the serving certificate's names: the webhook Service's DNS
	// names (SERVICE.NAMESPACE.svc), or an IP address.
	Hosts []string
	// CASettle is how long a new authority is in the bundle before it
	// signs the serving certificate. Default: one minute.
	CASettle time.Duration
}

// Lifetimes of the certificates WebhookCerts makes.
const (
	servingValidity = 90 * 24 * time.Hour
	servingRenew    = 30 * 24 * time.Hour
	caValidity      = 10 * 365 * 24 * time.Hour
	caRenew         = caValidity / 3
	certsResync     = time.Minute
	caRotatedAt     = "ctrlkit.dev/ca-rotated-at"
	// bundleWritten is the hash of the bundle a pass found in every
	// configuration and CRD it keeps: a new authority signs only once the
	// API server has been given it.
	bundleWritten = "ctrlkit.dev/bundle-written"
)

// webhookCerts is WebhookCerts at work.
type webhookCerts struct {
	m       *Manager
	opts    WebhookCerts
	get     func(object.ObjectName) (*corev1.Secret, bool) // the Secret's informer's cache
	synced  func() bool
	current atomic.Pointer[tls.Certificate]
	changed chan struct{} // buffer 1: the Secret changed
	now     func() time.Time
}

// newWebhookCerts checks o; watch starts watching the Secret once the
// manager is made. Called by New.
func newWebhookCerts(o WebhookCerts) (*webhookCerts, error) {
	if o.Secret.Namespace == "" || o.Secret.Name == "" {
		return nil, fmt.Errorf("manager: WebhookCerts.Secret %q: want a namespace and a name", o.Secret)
	}
	o.Hosts = normalHosts(o.Hosts)
	if len(o.Hosts) == 0 {
		return nil, errors.New("manager: WebhookCerts needs Hosts, the serving certificate's names")
	}
	if o.CASettle <= 0 {
		o.CASettle = time.Minute
	}
	return &webhookCerts{opts: o, changed: make(chan struct{}, 1), now: time.Now}, nil
}

// watch makes the Secret's informer and the runnable that keeps it. The
// informer is the manager's but not its factory's: the factory writes
// snapshots of its caches to disk (Options.CacheDir), and this one holds
// the authority's private key.
func (c *webhookCerts) watch(m *Manager) error {
	c.m = m
	poke := func() {
		select {
		case c.changed <- struct{}{}:
		default:
		}
	}
	secrets := m.kube.CoreV1().Secrets(c.opts.Secret.Namespace)
	secret, err := watchNamed[*corev1.Secret](m.opts.Logger, c.opts.Secret.Name, "webhook certificate Secret "+c.opts.Secret.String(), poke,
		func(ctx context.Context, o metav1.ListOptions) (*corev1.SecretList, error) {
			return secrets.List(ctx, o)
		},
		secrets.Watch)
	if err != nil {
		return err
	}
	c.get, c.synced = secret.Reader().Get, secret.HasSynced
	m.runnables = append(m.runnables, everyReplica(func(ctx context.Context) error {
		// The program's configurations (known once its webhooks are
		// registered, before Run), so that one applied again without its
		// bundle has it back at once, not at the next resync.
		informers := []interface{ Run(context.Context) error }{secret}
		adm := m.kube.AdmissionregistrationV1()
		for _, h := range m.injectionHooks() {
			var inf interface{ Run(context.Context) error }
			var err error
			if h.resource == mutatingConfigurations {
				inf, err = watchNamed[*admissionregistrationv1.MutatingWebhookConfiguration](m.opts.Logger, h.name, "webhook configuration "+h.name,
					poke, adm.MutatingWebhookConfigurations().List, adm.MutatingWebhookConfigurations().Watch)
			} else {
				inf, err = watchNamed[*admissionregistrationv1.ValidatingWebhookConfiguration](m.opts.Logger, h.name, "webhook configuration "+h.name,
					poke, adm.ValidatingWebhookConfigurations().List, adm.ValidatingWebhookConfigurations().Watch)
			}
			if err != nil {
				return err
			}
			informers = append(informers, inf)
		}
		var wg sync.WaitGroup
		errs := make([]error, len(informers))
		for i, inf := range informers {
			wg.Go(func() { errs[i] = inf.Run(ctx) })
		}
		err := c.run(ctx)
		wg.Wait()
		return errors.Join(append(errs, err)...)
	}))
	return nil
}

// watchNamed returns an informer of the one object called name, through
// list and watch (a client's methods), that calls poke at each change. It
// is the manager's but not its factory's: it writes no snapshot.
func watchNamed[T Object, L runtime.Object](log *slog.Logger, name, what string, poke func(),
	list listwatch.ListFunc[L], watch listwatch.WatchFunc) (*informer.SharedIndexInformer[T], error) {
	fo := informer.FactoryOptions{DetectMutations: informer.DetectNever}
	fo.Logger = log // a list or watch the role refuses is logged, as the manager's own informers' are
	inf, err := informer.New(listwatch.New[T](list, watch, listwatch.Options{FieldSelector: "metadata.name=" + name}),
		informer.Options[T]{Name: what, FactoryOptions: fo})
	if err != nil {
		return nil, err
	}
	_, err = inf.AddEventHandler(handler.Funcs[T]{
		AddFunc:    func(T, bool) { poke() },
		UpdateFunc: func(_, _ T) { poke() },
		DeleteFunc: func(object.Deleted[T]) { poke() },
	}, informer.HandlerOptions{Name: "webhook-certificates"})
	return inf, err
}

// everyReplica is a runnable that runs on every replica, leader or not.
type everyReplica func(context.Context) error

func (f everyReplica) Run(ctx context.Context) error { return f(ctx) }
func (everyReplica) NeedLeaderElection() bool        { return false }

// certificate is the webhook server's Options.Certificate.
func (c *webhookCerts) certificate() (*tls.Certificate, error) {
	if cert := c.current.Load(); cert != nil {
		return cert, nil
	}
	return nil, fmt.Errorf("no certificate in Secret %s yet", c.opts.Secret)
}

// run keeps the Secret, the certificate served and the bundles right until
// ctx ends, from the Secret's informer's sync on: whenever the Secret
// changes, every certsResync (a configuration applied again without its
// bundle, a renewal due), 5s after a failed pass, and when a new
// authority has settled.
func (c *webhookCerts) run(ctx context.Context) error {
	poll := time.NewTicker(50 * time.Millisecond)
	for !c.synced() {
		select {
		case <-ctx.Done():
			poll.Stop()
			return nil
		case <-poll.C:
		}
	}
	poll.Stop()
	for {
		wait, err := c.sync(ctx)
		if err != nil && ctx.Err() == nil {
			c.m.opts.Logger.Error("manager: webhook certificates", "secret", c.opts.Secret.String(), "err", shorten(err))
			wait = 5 * time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-c.changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// sync makes one pass: read the Secret, renew what is due, serve its
// serving pair, write the bundle where it is missing. It returns how long
// to wait before the next pass, unless the Secret changes.
func (c *webhookCerts) sync(ctx context.Context) (time.Duration, error) {
	secret, ok := c.get(c.opts.Secret)
	var data map[string][]byte
	var annotations map[string]string
	if ok {
		data, annotations = secret.Data, secret.Annotations
	} else {
		secret = nil
	}
	next, nextAnn, wait, changed, err := c.renew(data, annotations)
	if err != nil {
		return 0, err
	}
	if changed { // the informer's event brings the next pass
		return certsResync, c.write(ctx, secret, next, nextAnn)
	}
	pair, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"])
	if err != nil {
		return 0, fmt.Errorf("the serving pair: %w", err)
	}
	if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
		return 0, err
	}
	if cur := c.current.Load(); cur == nil || !bytes.Equal(cur.Certificate[0], pair.Certificate[0]) {
		c.current.Store(&pair)
		c.m.opts.Logger.Info("manager: serving the webhook certificate of the Secret", "secret", c.opts.Secret.String(),
			"notAfter", pair.Leaf.NotAfter)
	}
	if err := c.inject(ctx, data["ca.crt"]); err != nil {
		return wait, err
	}
	if h := bundleHash(data["ca.crt"]); annotations[bundleWritten] != h { // the next pass may let a new authority sign
		ann := maps.Clone(annotations)
		if ann == nil {
			ann = map[string]string{}
		}
		ann[bundleWritten] = h
		return wait, c.write(ctx, secret, data, ann)
	}
	return wait, nil
}

// bundleHash identifies a bundle in the Secret's annotations.
func bundleHash(bundle []byte) string {
	sum := sha256.Sum256(bundle)
	return hex.EncodeToString(sum[:8])
}

// renew returns the Secret's data and annotations as they should be now,
// how long until a pass is due (a new authority settling), and whether
// they differ from data.
func (c *webhookCerts) renew(data map[string][]byte, ann map[string]string) (map[string][]byte, map[string]string, time.Duration, bool, error) {
	now := c.now()
	out, outAnn := maps.Clone(data), maps.Clone(ann)
	if out == nil {
		out = map[string][]byte{}
	}
	if outAnn == nil {
		outAnn = map[string]string{}
	}
	changed := false
	ca, caKey, caOK := parseCA(data["ca.crt"], data["ca.key"])
	switch {
	case !caOK || now.After(ca.NotAfter.Add(-caRenew)):
		old := certs.Bundle(data["ca.crt"])
		var err error
		if ca, caKey, err = certs.NewCA("ctrlkit webhook CA "+now.UTC().Format(time.RFC3339), now, caValidity); err != nil {
			return nil, nil, 0, false, err
		}
		bundle := certs.CertPEM(ca.Raw)
		for _, o := range old { // the old authorities stay while valid: what they signed is still served
			if now.Before(o.NotAfter) {
				bundle = append(bundle, certs.CertPEM(o.Raw)...)
			}
		}
		out["ca.crt"], out["ca.key"], changed = bundle, certs.KeyPEM(caKey), true
		rotated := now
		if len(old) == 0 { // nothing trusted an older one: sign at once
			rotated = now.Add(-c.opts.CASettle)
		}
		outAnn[caRotatedAt] = rotated.UTC().Format(time.RFC3339Nano)
	default:
		if bundle := pruneBundle(data["ca.crt"], ca, now); !bytes.Equal(bundle, data["ca.crt"]) {
			out["ca.crt"], changed = bundle, true
		}
	}
	rotated, _ := time.Parse(time.RFC3339Nano, outAnn[caRotatedAt])
	settleAt := rotated.Add(c.opts.CASettle)
	// A new authority signs once CASettle passed and a pass found the
	// bundle holding it in every configuration and CRD.
	settled := !now.Before(settleAt) && outAnn[bundleWritten] == bundleHash(out["ca.crt"])
	leaf, leafOK := parseServing(data["tls.crt"], data["tls.key"])
	current := leafOK && leaf.CheckSignatureFrom(ca) == nil
	due := !leafOK || now.After(leaf.NotAfter.Add(-servingRenew)) || !sameHosts(leaf, c.opts.Hosts) || (!current && settled)
	if due && !settled && leafOK && now.Before(leaf.NotAfter) && !current {
		due = false // the old authority's certificate serves until the API server has read the new bundle
	}
	if due {
		certPEM, keyPEM, err := certs.Serving(ca, caKey, c.opts.Hosts, now, servingValidity)
		if err != nil {
			return nil, nil, 0, false, err
		}
		out["tls.crt"], out["tls.key"], changed = certPEM, keyPEM, true
	}
	wait := certsResync
	if !settled && !current && now.Before(settleAt) {
		wait = min(wait, settleAt.Sub(now))
	}
	return out, outAnn, wait, changed, nil
}

// write creates or updates the Secret; a conflict is left to the next
// pass (another replica wrote first).
func (c *webhookCerts) write(ctx context.Context, old *corev1.Secret, data map[string][]byte, ann map[string]string) error {
	secrets := c.m.kube.CoreV1().Secrets(c.opts.Secret.Namespace)
	var err error
	if old == nil {
		_, err = secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.opts.Secret.Name,
			Namespace: c.opts.Secret.Namespace, Annotations: ann}, Type: corev1.SecretTypeTLS, Data: data}, metav1.CreateOptions{})
	} else {
		s := old.DeepCopy()
		s.Data, s.Annotations = data, ann
		_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	}
	if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err == nil {
		c.m.opts.Logger.Info("manager: webhook certificates written", "secret", c.opts.Secret.String())
	}
	return err
}

// inject writes bundle into the caBundle of the server's webhook
// configurations and of the CRDs of the kinds it converts, where it
// differs. A missing object is skipped (not applied yet).
func (c *webhookCerts) inject(ctx context.Context, bundle []byte) error {
	adm := c.m.kube.AdmissionregistrationV1()
	var errs []error
	for _, h := range c.m.injectionHooks() {
		if h.resource == mutatingConfigurations {
			errs = append(errs, injectInto(ctx, bundle, adm.MutatingWebhookConfigurations(), h.name,
				func(v *admissionregistrationv1.MutatingWebhookConfiguration) []*[]byte {
					return caBundles(v.Webhooks, func(w *admissionregistrationv1.MutatingWebhook) *[]byte { return &w.ClientConfig.CABundle })
				}))
			continue
		}
		errs = append(errs, injectInto(ctx, bundle, adm.ValidatingWebhookConfigurations(), h.name,
			func(v *admissionregistrationv1.ValidatingWebhookConfiguration) []*[]byte {
				return caBundles(v.Webhooks, func(w *admissionregistrationv1.ValidatingWebhook) *[]byte { return &w.ClientConfig.CABundle })
			}))
	}
	return errors.Join(append(errs, c.injectCRDs(ctx, bundle))...)
}

// caBundles points at the caBundle of each of webhooks, through bundle.
func caBundles[W any](webhooks []W, bundle func(*W) *[]byte) []*[]byte {
	out := make([]*[]byte, len(webhooks))
	for i := range webhooks {
		out[i] = bundle(&webhooks[i])
	}
	return out
}

// configurations is what inject needs of a webhook configuration client.
type configurations[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// injectInto writes bundle into every caBundle of the configuration
// called name, unless it is missing or holds it already.
func injectInto[T any](ctx context.Context, bundle []byte, client configurations[T], name string, bundles func(T) []*[]byte) error {
	obj, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // not applied yet: the next pass looks again
	}
	if err != nil {
		return err
	}
	stale := false
	for _, b := range bundles(obj) {
		if !bytes.Equal(*b, bundle) {
			*b, stale = bundle, true
		}
	}
	if stale {
		_, err = client.Update(ctx, obj, metav1.UpdateOptions{})
	}
	return err
}

// injectCRDs writes bundle into the conversion webhook of the converted
// kinds' CRDs, where it is set and differs.
func (c *webhookCerts) injectCRDs(ctx context.Context, bundle []byte) error {
	var errs []error
	_, converted := c.m.webhooks.Registered()
	rc := c.m.kube.Discovery().RESTClient()
	plurals := c.m.plurals()
	for _, gk := range converted {
		gvr := plurals.resource(gk.WithVersion(""))
		path := "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + gvr.Resource + "." + gk.Group
		raw, err := rc.Get().AbsPath(path).SetHeader("Accept", "application/json").DoRaw(ctx) // not the client's protobuf
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var crd struct {
			Spec struct {
				Conversion *struct {
					Webhook *struct {
						ClientConfig *struct {
							CABundle []byte `json:"caBundle"`
						} `json:"clientConfig"`
					} `json:"webhook"`
				} `json:"conversion"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(raw, &crd); err != nil {
			errs = append(errs, err)
			continue
		}
		cv := crd.Spec.Conversion
		if cv == nil || cv.Webhook == nil || cv.Webhook.ClientConfig == nil || bytes.Equal(cv.Webhook.ClientConfig.CABundle, bundle) {
			continue // no conversion webhook set (the manifests set it), or the bundle is there
		}
		patch := fmt.Appendf(nil, `{"spec":{"conversion":{"webhook":{"clientConfig":{"caBundle":%q}}}}}`,
			base64.StdEncoding.EncodeToString(bundle))
		errs = append(errs, rc.Patch(types.MergePatchType).AbsPath(path).Body(patch).Do(ctx).Error())
	}
	return errors.Join(errs...)
}

// parseCA returns the first certificate of bundle and the key, if they
// are a valid authority and its key.
func parseCA(bundle, keyPEM []byte) (*x509.Certificate, *ecdsa.PrivateKey, bool) {
	cas := certs.Bundle(bundle)
	if len(cas) == 0 || !cas[0].IsCA {
		return nil, nil, false
	}
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, nil, false
	}
	key, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil || !key.PublicKey.Equal(cas[0].PublicKey) {
		return nil, nil, false
	}
	return cas[0], key, true
}

// pruneBundle returns bundle without the authorities other than ca that
// expired by now.
func pruneBundle(bundle []byte, ca *x509.Certificate, now time.Time) []byte {
	out := certs.CertPEM(ca.Raw)
	for _, c := range certs.Bundle(bundle)[1:] {
		if now.Before(c.NotAfter) {
			out = append(out, certs.CertPEM(c.Raw)...)
		}
	}
	return out
}

// parseServing returns the serving certificate, if the pair is valid.
func parseServing(certPEM, keyPEM []byte) (*x509.Certificate, bool) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	return leaf, err == nil
}

// normalHosts returns hosts trimmed, without empty names or repeats, IP
// addresses written as a certificate reads them back (FD00::10 is
// fd00::10), in their first order: the form sameHosts compares, so that a
// certificate made for them is not found wanting at every pass.
func normalHosts(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		if h != "" && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// sameHosts reports whether leaf names exactly hosts (normalHosts).
func sameHosts(leaf *x509.Certificate, hosts []string) bool {
	var names []string
	names = append(names, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		names = append(names, ip.String())
	}
	want := slices.Clone(hosts)
	slices.Sort(names)
	slices.Sort(want)
	return slices.Equal(names, want)
}
