package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
	"github.com/ctrlkit/ctrlkit/object"
)

// Secrets is a provider of clusters from kubeconfig Secrets in one
// namespace of a management cluster, as Cluster API writes them: the
// Secret "<cluster>-kubeconfig" holds the cluster's kubeconfig under the
// key "value". A Secret created engages its cluster, one changed is given
// to Fleet.Update (rotated credentials keep the cluster's cache; another
// server engages it again), one deleted disengages it. A change to a
// kubeconfig that cannot be used (it does not parse, or is refused as
// below) leaves its cluster running on the previous one, listed by
// Fleet.Refused until the Secret is fixed or deleted. It updates and
// disengages only the clusters it engaged: a Secret named after a cluster
// that another provider or the program engaged is skipped with a warning,
// so whoever can write Secrets here cannot redirect or drop it. A Secret
// that holds no usable kubeconfig is logged, skipped and listed by
// Fleet.Refused, as is one that runs a credential plugin (unless
// AllowExec) or reads credentials or certificates from local files (never:
// whoever can write Secrets there would choose what the process reads and
// where it sends it).
type Secrets struct {
	// AllowExec accepts kubeconfigs that run a credential plugin (exec,
	// auth-provider) in this process; an exec plugin's command must still
	// be a file no other user could have planted or swapped (found on PATH
	// when it has no slash).
	AllowExec bool
	// Kube reads the Secrets; Namespace is where they are: required (see
	// Validate).
	Kube      kubernetes.Interface
	Namespace string
	// LabelSelector, if set, narrows the Secrets watched (API syntax).
	LabelSelector string
	// Suffix ends a kubeconfig Secret's name; the cluster's name is what
	// comes before it, and a Secret whose name does not end with it (or is
	// nothing but it) is not a kubeconfig Secret. Default: SecretSuffix,
	// Cluster API's "-kubeconfig"; "-" for none: the Secret's name is the
	// cluster's (multicluster-runtime's kubeconfig provider names them so,
	// with Key "kubeconfig" and a label to select them by).
	Suffix string
	// Key is the data key holding the kubeconfig. Default: "value", Cluster
	// API's.
	Key string
	// Logger receives a line per cluster engaged, disengaged or refused.
	// Default: the fleet's (Fleet.Logger).
	Logger *slog.Logger
}

// Validate refuses a provider without Kube or Namespace. A cluster's
// kubeconfig is trusted as the cluster: it is read from one namespace,
// whose Secrets only those who may point the program at a cluster can
// write. Every namespace (the API's "") would let whoever can write a
// Secret anywhere (a tenant in their own namespace) engage a cluster, or
// point an engaged one at a server of theirs; it would also need the right
// to read every Secret of the management cluster. Run and
// manager.NewFleet call it.
func (p Secrets) Validate() error {
	switch {
	case p.Kube == nil:
		return errors.New("fleet: Secrets: Kube is required")
	case p.Namespace == "":
		return errors.New("fleet: Secrets: Namespace is required: kubeconfig Secrets are read from one namespace, " +
			"which only those who may give the program a cluster can write (from every namespace, anyone who can write " +
			"a Secret anywhere could redirect a cluster)")
	}
	return nil
}

// Watches is what p lists and watches: the Secrets of its namespace.
func (p Secrets) Watches() []Watched { return []Watched{{Resource: "secrets", Namespace: p.Namespace}} }

// SecretSuffix ends the name of a kubeconfig Secret; the cluster's name
// is what comes before it.
const SecretSuffix = "-kubeconfig"

// Run keeps f's clusters those of the Secrets until ctx ends.
func (p Secrets) Run(ctx context.Context, f *Fleet) error {
	if err := p.Validate(); err != nil {
		return err
	}
	log := p.Logger
	if log == nil {
		log = f.Logger()
	}
	secrets := p.Kube.CoreV1().Secrets(p.Namespace)
	// Its list and watch errors (a 403: no RBAC to list the Secrets) are
	// logged and counted as any informer's, and Fleet.Ready names them
	// until the first list succeeds.
	name := fmt.Sprintf("%s: kubeconfig Secrets in namespace %s", f.ctrl.Name(), p.Namespace)
	if p.LabelSelector != "" {
		name += ", labels " + p.LabelSelector // two providers of one namespace, told apart (names label the metrics)
	}
	inf, err := informer.New[*corev1.Secret](listwatch.New[*corev1.Secret](secrets.List, secrets.Watch,
		listwatch.Options{LabelSelector: p.LabelSelector}), informer.Options[*corev1.Secret]{Name: name,
		FactoryOptions: informer.FactoryOptions{Telemetry: f.opts.Controller.Telemetry}})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	defer f.watch(name, watchedCache{synced: inf.HasSynced, lastErr: inf.LastError})()
	// owned are the clusters this provider engaged: it updates and
	// disengages only those, never a cluster of the same name that another
	// provider or the program engaged (whoever can write a Secret here
	// must not redirect or drop it). The handler's calls come from one
	// goroutine.
	owned := map[string]bool{}
	suffix, key := cmp.Or(p.Suffix, SecretSuffix), cmp.Or(p.Key, "value")
	if suffix == "-" {
		suffix = ""
	}
	clusterOf := func(secret string) (string, bool) {
		name, ok := strings.CutSuffix(secret, suffix)
		return name, ok && name != ""
	}
	engage := func(s *corev1.Secret) {
		name, ok := clusterOf(s.Name)
		if !ok {
			return
		}
		where := p.Namespace + "/" + s.Name
		cfg, err := kubeconfigPolicy{allowExec: p.AllowExec}.restConfig(s.Data[key])
		switch {
		case err != nil && len(s.Data[key]) == 0:
			err = fmt.Errorf("fleet: cluster %s: no kubeconfig under the Secret's key %q", name, key)
		case err != nil:
			err = fmt.Errorf("fleet: cluster %s: %w", name, err)
		case owned[name]:
			err = f.Update(name, cfg) // a changed Secret: rotated credentials keep the cache, another server does not
			if err == nil {
				log.Info("fleet: cluster's kubeconfig changed", "cluster", name, "server", redactedHost(cfg.Host))
				return
			}
		default:
			if err = f.Engage(name, cfg); errors.Is(err, ErrEngaged) {
				log.Warn("fleet: kubeconfig Secret skipped: its cluster was engaged by another provider", "cluster", name,
					"secret", where)
				return
			}
		}
		switch {
		case err == nil:
			owned[name] = true
			log.Info("fleet: cluster engaged", "cluster", name, "server", redactedHost(cfg.Host))
		case owned[name]:
			if !f.changeFailed(name, err, log, "secret", where) {
				delete(owned, name)
			}
		default:
			_ = f.refuse(name, err) // for Refused, unless another provider holds the name
			log.Warn("fleet: cluster not engaged", "cluster", name, "secret", where, "err", err)
		}
	}
	if _, err := inf.AddEventHandler(handler.Funcs[*corev1.Secret]{
		AddFunc: func(s *corev1.Secret, _ bool) { engage(s) },
		UpdateFunc: func(old, s *corev1.Secret) {
			if string(old.Data[key]) != string(s.Data[key]) {
				engage(s)
			}
		},
		DeleteFunc: func(d object.Deleted[*corev1.Secret]) {
			name, ok := clusterOf(d.Name.Name)
			switch {
			case !ok:
			case owned[name]:
				delete(owned, name)
				if f.Disengage(name) == nil {
					log.Info("fleet: cluster disengaged: its kubeconfig Secret is gone", "cluster", name)
				}
			default:
				f.unrefuse(name) // refused, or another provider's: only a refusal is forgotten
			}
		},
	}, informer.HandlerOptions{Name: "fleet"}); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return inf.Run(ctx)
}
