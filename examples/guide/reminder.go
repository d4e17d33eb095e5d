package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/object"
	"github.com/ctrlkit/ctrlkit/store"
	"github.com/ctrlkit/ctrlkit/workqueue"
)

// Reminder sends, every hour, a reminder for each ConfigMap labelled
// remind=true to a service outside the cluster, and withdraws them when
// the ConfigMap is deleted: a finalizer keeps the ConfigMap until the
// service has said so.
type Reminder struct {
	ConfigMaps store.Reader[*corev1.ConfigMap]
	Kube       kubernetes.Interface
	Service    *http.Client     // the service's client
	URL        string           // the service's address
	Now        func() time.Time // time.Now in production; the trial's clock in a test
}

const (
	every    = time.Hour
	withdraw = "guide.ctrlkit.dev/withdraw-reminders" // the finalizer
	lastTick = "guide.ctrlkit.dev/last-reminder"      // the tick last sent, in Unix seconds
)

// Reconcile sends the reminder of the latest hour due and comes back at the
// next one (RequeueAfter, on the queue's clock).
func (r *Reminder) Reconcile(ctx context.Context, name object.ObjectName) (controller.Result, error) {
	cm, ok := r.ConfigMaps.Get(name)
	if !ok {
		return controller.Result{}, nil
	}
	cm = cm.DeepCopy()
	switch guarded := slices.Contains(cm.Finalizers, withdraw); {
	case cm.DeletionTimestamp != nil && guarded:
		// A timeout is no answer: the service may or may not have acted.
		// Only its answer (done, or 404: nothing to withdraw) frees the
		// ConfigMap; anything else is retried.
		if err := r.call(ctx, http.MethodDelete, name, 0); err != nil {
			return controller.Result{}, err
		}
		cm.Finalizers = slices.DeleteFunc(cm.Finalizers, func(f string) bool { return f == withdraw })
		return controller.Result{}, r.update(ctx, cm)
	case cm.DeletionTimestamp != nil:
		return controller.Result{}, nil
	case !guarded:
		cm.Finalizers = append(cm.Finalizers, withdraw)
		return controller.Result{}, r.update(ctx, cm) // the update brings it back
	}
	last := cm.CreationTimestamp.Time
	if s, ok := cm.Annotations[lastTick]; ok {
		unix, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return controller.Result{}, fmt.Errorf("annotation %s: %w", lastTick, err)
		}
		last = time.Unix(unix, 0)
	}
	now := r.Now()
	if next := last.Add(every); now.Before(next) {
		return controller.Result{RequeueAfter: next.Sub(now)}, nil
	}
	tick := last.Add(now.Sub(last).Truncate(every)) // the latest hour due
	// A PUT named by the tick: sent again (after a crash, or when its
	// answer was lost) it changes nothing.
	if err := r.call(ctx, http.MethodPut, name, tick.Unix()); err != nil {
		return controller.Result{}, err
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[lastTick] = strconv.FormatInt(tick.Unix(), 10)
	return controller.Result{RequeueAfter: tick.Add(every).Sub(now)}, r.update(ctx, cm)
}

// call sends a reminder of tick (PUT) or withdraws every reminder of name
// (DELETE, tick 0).
func (r *Reminder) call(ctx context.Context, method string, name object.ObjectName, tick int64) error {
	u := r.URL + "/reminders/" + name.Namespace + "/" + name.Name
	if tick != 0 {
		u += "/" + strconv.FormatInt(tick, 10)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := r.Service.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode >= 300 && !(method == http.MethodDelete && resp.StatusCode == http.StatusNotFound) {
		return fmt.Errorf("%s %s: %s", method, u, resp.Status)
	}
	return nil
}

func (r *Reminder) update(ctx context.Context, cm *corev1.ConfigMap) error {
	_, err := r.Kube.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return err // a conflict retries from the cache's newer copy
}

// SetupReminder adds the reminder to m, calling the service at url with
// service. clock is its time: nil for the real one.
func SetupReminder(m *manager.Manager, namespace string, service *http.Client, url string, clock workqueue.Clock) error {
	cms := manager.Informer[*corev1.ConfigMap](m, manager.Scope{Namespace: namespace, LabelSelector: "remind=true"})
	r := &Reminder{ConfigMaps: cms.Reader(), Kube: m.Kube(), Service: service, URL: url, Now: time.Now}
	if clock != nil {
		r.Now = clock.Now
	}
	_, err := manager.NewController(m, "reminder", r, manager.ControllerOptions{
		Options: controller.Options[object.ObjectName]{Clock: clock}}, manager.For(cms))
	return err
}
