package perturb_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/perturb"
)

// thingsApp is the application an operator manages, outside the cluster
// (a cloud API): POST /things?owner=O makes a thing with a fresh id (not
// idempotent, as many cloud APIs), DELETE /things/ID deletes it (404 once
// gone), GET /things?owner=O lists the owner's ids.
type thingsApp struct {
	mu     sync.Mutex
	next   int
	things map[int]string // id -> owner ("namespace/name")
}

func (a *thingsApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	owner := r.URL.Query().Get("owner")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/things":
		a.next++
		a.things[a.next] = owner
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(a.next)
	case r.Method == http.MethodGet && r.URL.Path == "/things":
		_ = json.NewEncoder(w).Encode(a.ofLocked(owner))
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/things/"):
		id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/things/"))
		if _, ok := a.things[id]; err != nil || !ok {
			http.NotFound(w, r)
			return
		}
		delete(a.things, id)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "no such call", http.StatusBadRequest)
	}
}

// of is the ids of owner's things, in order.
func (a *thingsApp) of(owner string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ofLocked(owner)
}

func (a *thingsApp) ofLocked(owner string) []int {
	ids := []int{}
	for id, o := range a.things {
		if o == owner {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// ownersOfThings is every owner that has a thing in namespace.
func (a *thingsApp) ownersOfThings(namespace string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, o := range a.things {
		if ns, name, _ := strings.Cut(o, "/"); ns == namespace && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

const thingGuard = "perturb.ctrlkit.dev/thing"

// thingKeeper gives every owner (a ConfigMap labelled role=owner) a thing
// in the application, recorded in the owner's annotation "thing", and
// deletes it behind a finalizer. Its bugs:
//   - "timeout is done": a delete that timed out is taken for done, and the
//     finalizer removed: if it never reached the application, the thing
//     leaks;
//   - "create again": a create that failed is sent again, though a
//     timed-out create may have made a thing: a lost answer makes two.
//
// The fixed one retries a delete until it is answered (404 is done), and
// before a create looks for a thing of the owner's to adopt.
type thingKeeper struct {
	bug    string
	kube   kubernetes.Interface
	owners func(object.ObjectName) (*corev1.ConfigMap, bool)
	app    *http.Client
	url    string
}

func (p *thingKeeper) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	owner, ok := p.owners(name)
	if !ok {
		return controller.Result{}, nil
	}
	has := slices.Contains(owner.Finalizers, thingGuard)
	id := owner.Annotations["thing"]
	switch {
	case owner.DeletionTimestamp != nil && !has:
		return controller.Result{}, nil
	case owner.DeletionTimestamp != nil:
		if id != "" {
			if err := p.delete(ctx, id); err != nil {
				return controller.Result{}, err
			}
		}
		return controller.Result{}, p.patch(ctx, owner, without(owner.Finalizers, thingGuard), "")
	case !has:
		return controller.Result{}, p.patch(ctx, owner, append(slices.Clone(owner.Finalizers), thingGuard), id)
	case id == "":
		made, err := p.create(ctx, name.String())
		if err != nil {
			return controller.Result{}, err
		}
		return controller.Result{}, p.patch(ctx, owner, owner.Finalizers, strconv.Itoa(made))
	}
	return controller.Result{}, nil
}

func (p *thingKeeper) delete(ctx context.Context, id string) error {
	resp, err := p.call(ctx, http.MethodDelete, "/things/"+id)
	var ne net.Error
	if err != nil && p.bug == "timeout is done" && errors.As(err, &ne) && ne.Timeout() {
		return nil // "it probably went through"
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("delete thing %s: %s", id, resp.Status)
	}
	return nil
}

func (p *thingKeeper) create(ctx context.Context, owner string) (int, error) {
	if p.bug != "create again" { // adopt what a create whose answer was lost made
		resp, err := p.call(ctx, http.MethodGet, "/things?owner="+owner)
		if err != nil {
			return 0, err
		}
		var ids []int
		err = json.NewDecoder(resp.Body).Decode(&ids)
		resp.Body.Close()
		if err != nil {
			return 0, err
		}
		if len(ids) > 0 {
			return ids[0], nil
		}
	}
	resp, err := p.call(ctx, http.MethodPost, "/things?owner="+owner)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var id int
	if resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("create a thing for %s: %s", owner, resp.Status)
	}
	return id, json.NewDecoder(resp.Body).Decode(&id)
}

func (p *thingKeeper) call(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, nil)
	if err != nil {
		return nil, err
	}
	return p.app.Do(req)
}

// patch writes owner's finalizers and thing annotation, guarded by the
// resource version the reconcile read.
func (p *thingKeeper) patch(ctx context.Context, owner *corev1.ConfigMap, fs []string, id string) error {
	var thing any = id
	if id == "" {
		thing = nil
	}
	return mergePatch(ctx, p.kube, owner, map[string]any{"finalizers": fs, "annotations": map[string]any{"thing": thing}})
}

// mergePatch writes meta into owner's metadata, guarded by the resource
// version the reconcile read (a stale read is a conflict, retried).
func mergePatch(ctx context.Context, kube kubernetes.Interface, owner *corev1.ConfigMap, meta map[string]any) error {
	meta["resourceVersion"] = owner.ResourceVersion
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().ConfigMaps(owner.Namespace).Patch(ctx, owner.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// thingKeeperScenario tests a thingKeeper with bug against app, served
// by srv.
func thingKeeperScenario(t *testing.T, bug string, app *thingsApp, srv *httptest.Server) perturb.Scenario {
	const owners, deleted = 1, 1
	ownerName := func(i int) string { return fmt.Sprintf("owner-%d", i) }
	return perturb.Scenario{
		Config: env.Get(t).Config(),
		Run: runManager(func(m *manager.Manager, e perturb.Env) error {
			cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: e.Namespace, LabelSelector: "role=owner"})
			p := &thingKeeper{bug: bug, kube: m.Kube(), owners: cms.Reader().Get, url: srv.URL,
				app: &http.Client{Transport: e.External(srv.Client().Transport)}}
			_, err := manager.NewController(m, "thingKeeper", p, manager.ControllerOptions{}, manager.For(cms))
			return err
		}),
		Workload: func(ctx context.Context, e perturb.Env) error {
			cms := e.Kube.CoreV1().ConfigMaps(e.Namespace)
			for i := range owners {
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ownerName(i),
					Labels: map[string]string{"role": "owner"}}}, metav1.CreateOptions{}); err != nil {
					return err
				}
			}
			if err := until(ctx, func() (bool, error) { // every owner has its thing, then some are deleted
				l, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "role=owner"})
				return err == nil && len(l.Items) == owners && !slices.ContainsFunc(l.Items, func(c corev1.ConfigMap) bool {
					return c.Annotations["thing"] == ""
				}), err
			}); err != nil {
				return err
			}
			// A user's pace: the owners live a while before some are
			// deleted (the invariants look every 20ms).
			if err := pace(ctx, 300*time.Millisecond); err != nil {
				return err
			}
			for i := range deleted {
				if err := cms.Delete(ctx, ownerName(i), metav1.DeleteOptions{}); err != nil {
					return err
				}
			}
			return nil
		},
		Settled: func(ctx context.Context, e perturb.Env) error {
			for i := range owners {
				_, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Get(ctx, ownerName(i), metav1.GetOptions{})
				if gone := i < deleted; gone != (err != nil) {
					return fmt.Errorf("owner %d: deleted %v, read: %v", i, gone, err)
				}
				if things := app.of(e.Namespace + "/" + ownerName(i)); i >= deleted && len(things) == 0 {
					return fmt.Errorf("%s has no thing yet", ownerName(i))
				}
			}
			return nil
		},
		Invariants: []perturb.Invariant{
			{Name: "an owner has one thing at most", Check: func(ctx context.Context, e perturb.Env) error {
				for i := range owners {
					if things := app.of(e.Namespace + "/" + ownerName(i)); len(things) > 1 {
						return fmt.Errorf("%s has %d things: %v", ownerName(i), len(things), things)
					}
				}
				return nil
			}},
			{Name: "no thing outlives its owner", Eventually: true, Check: func(ctx context.Context, e perturb.Env) error {
				for _, o := range app.ownersOfThings(e.Namespace) {
					if _, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Get(ctx, o, metav1.GetOptions{}); err != nil {
						return fmt.Errorf("the thing of %s leaked: %v", o, err)
					}
				}
				return nil
			}},
		},
		Seed:   5,
		Faults: perturb.Faults{ExternalTimeouts: true},
	}
}

// A finalizer that takes a timed-out delete of the external thing for
// done leaks the thing when the delete never reached the application; a
// create sent again after a timeout makes a second thing when the first
// one's answer was lost. Both are found; the controller that retries a
// delete until answered and adopts before it creates passes every trial.
func TestCheck_findsExternalCallsTakenForDoneOrFailedAndPassesTheFix(t *testing.T) {
	app := &thingsApp{things: map[int]string{}}
	srv := httptest.NewServer(app)
	defer srv.Close() // before the leak checks
	finds(t, "a timed-out delete taken for done", "leaked", thingKeeperScenario(t, "timeout is done", app, srv))
	finds(t, "a create sent again after its answer was lost", "has 2 things", thingKeeperScenario(t, "create again", app, srv))
	passes(t, thingKeeperScenario(t, "", app, srv))
}
