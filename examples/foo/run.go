package foo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/ctrlkit/ctrlkit/controller"
	"github.com/ctrlkit/ctrlkit/examples/foo/api/v1alpha1"
	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/listwatch"
)

// RunOptions configure Run. The zero value runs on all namespaces.
type RunOptions struct {
	// Namespace limits the controller to one namespace. Default: all.
	Namespace string
	// Workers is the number of concurrent reconciles. Default: 2.
	Workers int
	// Registerer receives the controller's, queue's and reflectors' metrics.
	Registerer prometheus.Registerer
	// Logger receives the pipeline's log lines. Default: discard.
	Logger *slog.Logger
	// OnSynced is called once, when both caches have synced.
	OnSynced func()
}

// Run checks that it can work (see Preflight), then runs the Foo controller
// against the API server of cfg until ctx ends. It returns nil after a clean
// shutdown, with every goroutine it started exited.
func Run(ctx context.Context, cfg *rest.Config, opts RunOptions) error {
	if opts.Workers == 0 {
		opts.Workers = 2
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	fc, err := v1alpha1.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := Preflight(ctx, kube, cfg.Host, opts.Namespace); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	events := record.NewBroadcaster(record.WithContext(ctx))
	defer events.Shutdown()
	events.StartRecordingToSink(eventSink{ctx: ctx, events: kube.CoreV1().Events("")})

	f := informer.NewFactory(informer.FactoryOptions{Registerer: opts.Registerer, Logger: opts.Logger})
	fooAPI, depAPI := fc.Foos(opts.Namespace), kube.AppsV1().Deployments(opts.Namespace)
	foos, err := informer.For(f, v1alpha1.Resource, opts.Namespace, func() listwatch.ListerWatcher[*v1alpha1.Foo] {
		return listwatch.New[*v1alpha1.Foo](fooAPI.List, fooAPI.Watch, listwatch.Options{})
	})
	if err != nil {
		return err
	}
	deps, err := informer.For(f, appsv1.SchemeGroupVersion.WithResource("deployments"), opts.Namespace,
		func() listwatch.ListerWatcher[*appsv1.Deployment] {
			return listwatch.New[*appsv1.Deployment](depAPI.List, depAPI.Watch, listwatch.Options{})
		})
	if err != nil {
		return err
	}
	rec := &Reconciler{Foos: foos.Indexer(), Deployments: deps.Indexer(), Kube: kube, FooClient: fc,
		Recorder: events.NewRecorder(scheme, corev1.EventSource{Component: "foo-controller"})}
	ctrl, err := controller.New[string](rec, controller.Options[string]{Name: "foo", Registerer: opts.Registerer, Logger: opts.Logger})
	if err != nil {
		return err
	}
	fooReg, err := foos.AddEventHandler(handler.EnqueueKey[*v1alpha1.Foo](ctrl, opts.Logger), informer.HandlerOptions{Name: "foo"})
	if err != nil {
		return err
	}
	depReg, err := deps.AddEventHandler(EnqueueOwner(ctrl), informer.HandlerOptions{Name: "foo-owner"})
	if err != nil {
		return err
	}
	var once sync.Once
	ctrl.WaitFor("foos and deployments", func() bool {
		ok := fooReg.HasSynced() && depReg.HasSynced()
		if ok && opts.OnSynced != nil {
			once.Do(opts.OnSynced)
		}
		return ok
	})

	g, ctx := errgroup.WithContext(ctx) // the first failure stops the others
	f.Start(ctx)
	g.Go(func() error { return ctrl.Run(ctx, opts.Workers) })
	g.Go(func() error { f.Wait(); return nil }) // the informers stop with ctx
	if err := g.Wait(); err != nil {
		return fmt.Errorf("foo controller: %w", err)
	}
	return nil
}

// eventSink writes events with Run's context, so that a write still in
// flight when Run returns (say, waiting out a Retry-After of a server that
// is shutting down) ends with it; client-go's EventSinkImpl writes with
// context.TODO. The recorder's interface takes no context, hence the
// stored one.
type eventSink struct {
	ctx    context.Context
	events typedcorev1.EventInterface
}

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	return s.events.CreateWithEventNamespaceWithContext(s.ctx, e)
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	return s.events.UpdateWithEventNamespaceWithContext(s.ctx, e)
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.events.PatchWithEventNamespaceWithContext(s.ctx, e, data)
}
