// Command crmirror keeps a Secret beside every ConfigMap labelled
// mirror=true, with the same data, owned by the ConfigMap so it is deleted
// with it: the controller-runtime twin of examples/mirror, compiled from
// docs/compare/mirror-controller-runtime.go.txt with controller-runtime's
// documented defaults (ctrl.GetConfigOrDie: KUBECONFIG or -kubeconfig, no
// client-side rate limit; a cache filtered by label; one worker).
//
// The one change from that text: the metrics and probe addresses are flags
// (kubebuilder's names and defaults), so that operatorbench can run it
// beside other programs listening on :8080.
//
//	KUBECONFIG=... crmirror -metrics-bind-address :8080 -health-probe-bind-address :8081
package main

import (
	"context"
	"flag"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Reconciler writes the Secret of one ConfigMap with server-side apply.
type Reconciler struct {
	client.Client
	Kube kubernetes.Interface
}

// Reconcile applies the Secret of the ConfigMap req names, if it exists.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err) // deleted: the garbage collector deletes its Secret
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	owner := metav1ac.OwnerReference().WithAPIVersion("v1").WithKind("ConfigMap").WithName(cm.Name).
		WithUID(cm.UID).WithController(true).WithBlockOwnerDeletion(true)
	secret := corev1ac.Secret(cm.Name, cm.Namespace).WithLabels(map[string]string{"mirrored": "true"}).WithData(data).
		WithOwnerReferences(owner)
	_, err := r.Kube.CoreV1().Secrets(cm.Namespace).Apply(ctx, secret, metav1.ApplyOptions{FieldManager: "mirror", Force: true})
	return ctrl.Result{}, err
}

func main() {
	var metricsAddr, probeAddr string
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "the address the metrics endpoint binds to")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "the address the probe endpoint binds to")
	flag.Parse() // also -kubeconfig, which controller-runtime registers
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("mirror")
	cfg := ctrl.GetConfigOrDie()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Label: labels.SelectorFromSet(labels.Set{"mirror": "true"})},
			&corev1.Secret{}:    {Label: labels.SelectorFromSet(labels.Set{"mirrored": "true"})},
		}},
	})
	if err != nil {
		log.Error(err, "unable to create manager")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	// controller-runtime has no built-in "caches synced" readiness check; this
	// one only says the process answers.
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "unable to set up ready check")
		os.Exit(1)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Error(err, "unable to create clientset")
		os.Exit(1)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Complete(&Reconciler{Client: mgr.GetClient(), Kube: kube})
	if err != nil {
		log.Error(err, "unable to create controller")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "problem running manager")
		os.Exit(1)
	}
}
