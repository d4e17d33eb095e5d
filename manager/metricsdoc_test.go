package manager_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/apiserver"
	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/internal/leakcheck"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
)

// Every series a running manager registers (a controller with For and
// Owns, a set of namespaces, cache snapshots) is listed in docs/metrics.md
// with its type and labels. CTRLKIT_METRICS_TABLE=1 prints the table's rows
// as the registry describes them.
func TestManager_everyMetricIsDocumented(t *testing.T) {
	srv := env.Get(t)
	ns := srv.Namespace(t)
	leakcheck.Check(t)
	kube := apiserver.Client(t, srv.Config())
	opts := quiet(t)
	opts.CacheDir = t.TempDir()
	m, err := manager.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	reconciled := make(chan struct{}, 1)
	rec := controller.ReconcileFunc[object.ObjectName](func(context.Context, object.ObjectName) (controller.Result, error) {
		select {
		case reconciled <- struct{}{}:
		default:
		}
		return controller.Result{}, nil
	})
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: ns})
	secrets := manager.Informer[*corev1.Secret](m, manager.Scope{Namespace: ns})
	set, err := manager.InNamespaces[*corev1.Pod](m, manager.Scope{}, ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manager.NewController(m, "documented", rec, manager.ControllerOptions{}, manager.For(cms), manager.Owns(secrets),
		set.Watches(func(*corev1.Pod) []object.ObjectName { return nil })); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reconciled:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile within 30s")
	}
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	fams := families(t, m)
	names := make([]string, 0, len(fams))
	for name := range fams {
		names = append(names, name)
	}
	slices.Sort(names)
	var rows []string
	for _, name := range names {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue // Go's own collectors, documented by client_golang
		}
		mf := fams[name]
		labels := map[string]bool{}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		var ls []string
		for l := range labels {
			ls = append(ls, "`"+l+"`")
		}
		slices.Sort(ls)
		row := fmt.Sprintf("| `%s` | %s | %s | %s |", name, strings.ToLower(mf.GetType().String()), strings.Join(ls, ", "), mf.GetHelp())
		rows = append(rows, row)
		switch {
		case !strings.Contains(string(doc), "| `"+name+"` |"):
			t.Errorf("%s (%s) is not in docs/metrics.md", name, mf.GetType())
		case !strings.Contains(string(doc), row+"\n"):
			t.Errorf("docs/metrics.md's row of %s differs from the registry's:\n%s", name, row)
		}
	}
	if os.Getenv("CTRLKIT_METRICS_TABLE") != "" {
		t.Log("\n" + strings.Join(rows, "\n"))
	}
}
