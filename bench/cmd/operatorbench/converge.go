package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// pollEvery is the convergence check's period.
const pollEvery = 100 * time.Millisecond

// errNotConverged is returned when a run does not converge in time.
var errNotConverged = errors.New("operatorbench: not converged")

// convergence is what converge found.
type convergence struct {
	// At is the start of the Secret LIST that found every live ConfigMap
	// mirrored and no other Secret.
	At time.Time
	// Live counts the labelled ConfigMaps.
	Live int
}

// converge waits until every one of cms, the labelled ConfigMaps as the
// workload left them, has its Secret (same data, controlled by it) and no
// other labelled Secret is left, polling a LIST every 100 ms. alive
// reports the operator's death, which ends the wait.
func converge(ctx context.Context, kube kubernetes.Interface, cms map[types.NamespacedName]*corev1.ConfigMap, alive func() error, timeout time.Duration) (convergence, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		if err := alive(); err != nil {
			return convergence{}, err
		}
		at := time.Now()
		sl, err := kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{LabelSelector: selectMirrored})
		if err != nil {
			return convergence{}, err
		}
		missing, extra := compare(cms, sl.Items)
		if missing == 0 && extra == 0 {
			return convergence{At: at, Live: len(cms)}, nil
		}
		select {
		case <-ctx.Done():
			return convergence{}, fmt.Errorf("%w after %v: %d of %d ConfigMaps without their Secret or with other data, %d Secrets without their ConfigMap",
				errNotConverged, timeout, missing, len(cms), extra)
		case <-t.C:
		}
	}
}

// compare counts the ConfigMaps whose Secret is missing or differs, and
// the Secrets whose ConfigMap is gone (none of that name, or one that is
// not their controller).
func compare(cms map[types.NamespacedName]*corev1.ConfigMap, secrets []corev1.Secret) (missing, extra int) {
	mirrored := 0
	for i := range secrets {
		s := &secrets[i]
		cm, ok := cms[types.NamespacedName{Namespace: s.Namespace, Name: s.Name}]
		owner := metav1.GetControllerOf(s)
		switch {
		case !ok || owner == nil || owner.UID != cm.UID:
			extra++
		case sameData(cm.Data, s.Data) && owner.Kind == "ConfigMap":
			mirrored++
		}
	}
	return len(cms) - mirrored, extra
}

// sameData says a Secret's data is a ConfigMap's.
func sameData(cm map[string]string, s map[string][]byte) bool {
	return maps.EqualFunc(cm, s, func(v string, b []byte) bool { return v == string(b) })
}

// waitMirrored waits until the Secret of ConfigMap ns/name exists with its
// data, polling every 20 ms: the operator is up and reconciling.
func waitMirrored(ctx context.Context, kube kubernetes.Interface, cm *corev1.ConfigMap, alive func() error, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if err := alive(); err != nil {
			return err
		}
		s, err := kube.CoreV1().Secrets(cm.Namespace).Get(ctx, cm.Name, metav1.GetOptions{})
		switch {
		case err == nil && sameData(cm.Data, s.Data):
			return nil
		case err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no Secret for the probe ConfigMap %s/%s after %v", cm.Namespace, cm.Name, timeout)
		case <-t.C:
		}
	}
}
