package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ctrlkit/ctrlkit/manager"
	"github.com/ctrlkit/ctrlkit/perturb"
)

// reminders is the service, in memory: PUT /reminders/NS/NAME/TICK keeps
// a reminder (again: no change), DELETE /reminders/NS/NAME withdraws
// NAME's (404 when there is none).
type reminders struct {
	mu   sync.Mutex
	kept map[string][]int64 // "NS/NAME" -> ticks
}

func (s *reminders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/reminders/"), "/")
	switch who := strings.Join(parts[:min(2, len(parts))], "/"); {
	case r.Method == http.MethodPut && len(parts) == 3:
		tick, err := strconv.ParseInt(parts[2], 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, t := range s.kept[who] {
			if t == tick {
				return // kept already
			}
		}
		s.kept[who] = append(s.kept[who], tick)
	case r.Method == http.MethodDelete && len(parts) == 2 && s.kept[who] != nil:
		delete(s.kept, who)
	case r.Method == http.MethodDelete:
		http.NotFound(w, r)
	default:
		http.Error(w, "no such call", http.StatusBadRequest)
	}
}

func (s *reminders) of(who string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kept[who]
}

// The reminder through two hours on the trial's clock (in a few seconds),
// then deleted, while every call to the service is in turn dropped or
// has its answer lost: the ConfigMap is reminded of, and once deleted
// nothing of it is left in the service.
func TestReminder_onTheTrialsClockWithLostAnswers(t *testing.T) {
	service := &reminders{kept: map[string][]int64{}}
	srv := httptest.NewServer(service)
	defer srv.Close()
	res := perturb.Check(t.Context(), perturb.Scenario{
		Config: env.Get(t).Config(),
		Run: func(ctx context.Context, e perturb.Env) error {
			m, err := manager.New(e.Config, manager.Options{HTTPAddr: "0", Logger: slog.New(slog.DiscardHandler), KeepKlogOutput: true})
			if err != nil {
				return err
			}
			// The service's calls go through the trial (e.External), and
			// the reminder's time is the trial's (e.Clock).
			client := &http.Client{Transport: e.External(http.DefaultTransport)}
			if err := SetupReminder(m, e.Namespace, client, srv.URL, e.Clock); err != nil {
				return err
			}
			return m.Run(ctx)
		},
		Workload: func(ctx context.Context, e perturb.Env) error {
			cms := e.Kube.CoreV1().ConfigMaps(e.Namespace)
			cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "standup",
				Labels: map[string]string{"remind": "true"}}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			if err := e.Clock.Advance(ctx, 2*time.Hour); err != nil { // two hours pass, in a second or so
				return err
			}
			second := cm.CreationTimestamp.Add(2 * time.Hour).Unix()
			for !slices.Contains(service.of(e.Namespace+"/standup"), second) { // reminded of the second hour
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
			return cms.Delete(ctx, "standup", metav1.DeleteOptions{})
		},
		Settled: func(ctx context.Context, e perturb.Env) error {
			_, err := e.Kube.CoreV1().ConfigMaps(e.Namespace).Get(ctx, "standup", metav1.GetOptions{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("standup is still there (%v)", err)
			}
			return nil
		},
		Invariants: []perturb.Invariant{
			{Name: "no reminder before its hour", Check: func(ctx context.Context, e perturb.Env) error {
				for _, tick := range service.of(e.Namespace + "/standup") {
					if time.Unix(tick, 0).After(e.Clock.Now()) {
						return fmt.Errorf("a reminder for %s, before its time", time.Unix(tick, 0).UTC())
					}
				}
				return nil
			}},
			{Name: "nothing left of a deleted ConfigMap", Eventually: true, Check: func(ctx context.Context, e perturb.Env) error {
				if left := service.of(e.Namespace + "/standup"); len(left) > 0 {
					return fmt.Errorf("the service still keeps %d reminders of standup", len(left))
				}
				return nil
			}},
		},
		Seed:   1,
		Faults: perturb.Faults{ExternalTimeouts: true}, // each call to the service dropped, then its answer lost
	})
	t.Logf("%d trials in %s", res.Trials, res.Took.Round(time.Millisecond))
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if res.Trials < 5 { // the unperturbed trial, and two per call: the second hour's reminder and the withdrawal at least
		t.Fatalf("%d trials, want 5 or more: %v", res.Trials, res.Ran)
	}
}
