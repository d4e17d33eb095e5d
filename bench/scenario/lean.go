package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	restwatch "k8s.io/client-go/rest/watch"

	"github.com/ctrlkit/ctrlkit/intern"
	"github.com/ctrlkit/ctrlkit/projection"
)

// LeanConfig sizes S8's recording.
type LeanConfig struct {
	Pods       int // created, then listed
	Updates    int // changes made after the list, each recorded as a watch frame
	Namespaces int // the Pods are spread over this many (ns-000, ...)
	Writers    int // concurrent clients creating and changing Pods
	PageSize   int // LIST page size
	// CreateBudget, if set, bounds the time spent creating: the Pods
	// created by then (the first k, each with its status) are the list.
	CreateBudget time.Duration
	Progress     io.Writer
}

func (c LeanConfig) withDefaults() LeanConfig {
	if c.Namespaces <= 0 {
		c.Namespaces = 100
	}
	if c.Writers <= 0 {
		c.Writers = 8
	}
	if c.PageSize <= 0 {
		c.PageSize = 500
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// LeanRecording is what the real API server sent: the protobuf bodies of a
// paginated LIST of every Pod and the protobuf watch stream that followed
// it. The bytes are kept outside the Go heap (see offHeap), so they neither
// count in a side's heap figures nor pace its garbage collector.
type LeanRecording struct {
	Pods, Events int
	Pages        [][]byte // each a whole response body: "k8s\x00" and a runtime.Unknown around a PodList
	Frames       []byte   // length-prefixed WatchEvent frames, as read from the stream
	ListBytes    int
	// How long recording took: creating the Pods (with their status), and
	// the updates.
	CreateTime, UpdateTime time.Duration
	want                   map[string]leanWant // key -> the Pod after the last event, from client-go's full decode
}

// leanWant is what every side's store must hold for a Pod at the end.
type leanWant struct {
	rv, node, phase, ready, revision, uid string
	conditions, labels                    int
}

// PodView is the projection S8 caches: what a controller that watches Pods'
// placement and readiness reads.
type PodView struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase      corev1.PodPhase       `json:"phase"`
		Conditions []corev1.PodCondition `json:"conditions"`
	} `json:"status"`
}

const (
	protobufType   = "application/vnd.kubernetes.protobuf"
	protobufStream = "application/vnd.kubernetes.protobuf;stream=watch"
)

// RecordLean creates cfg.Pods realistic Pods (Pod) with their status on the
// server of rc, lists them in pages of protobuf, then watches in protobuf
// from the list's resource version while cfg.Updates changes are made
// (label changes and Ready flips, alternately), keeping every byte received.
func RecordLean(ctx context.Context, rc *rest.Config, cfg LeanConfig) (*LeanRecording, error) {
	cfg = cfg.withDefaults()
	if cfg.Pods <= 0 || cfg.Updates < 0 {
		return nil, fmt.Errorf("scenario: S8 needs Pods > 0 and Updates >= 0, got %d and %d", cfg.Pods, cfg.Updates)
	}
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = -1, 0
	rc.ContentType, rc.AcceptContentTypes = protobufType, protobufType
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	rec := &LeanRecording{Pods: cfg.Pods}
	for i := range min(cfg.Namespaces, cfg.Pods) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%03d", i)}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	start := time.Now()
	var deadline time.Time
	if cfg.CreateBudget > 0 {
		deadline = start.Add(cfg.CreateBudget)
	}
	rec.Pods, err = parallel(ctx, cfg.Writers, cfg.Pods, deadline, func(ctx context.Context, i int) error {
		p := pod(i, cfg.Namespaces, "")
		status := p.Status
		created, err := kube.CoreV1().Pods(p.Namespace).Create(ctx, &p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = status // as the kubelet reports it
		_, err = kube.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	rec.CreateTime = time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("creating Pods: %w", err)
	}
	fmt.Fprintf(cfg.Progress, "  S8: created %d Pods with status in %v (%d writers, %.0f Pods/s)\n", rec.Pods,
		rec.CreateTime.Round(time.Millisecond), cfg.Writers, float64(rec.Pods)/rec.CreateTime.Seconds())
	if rec.Pods < cfg.Pods {
		fmt.Fprintf(cfg.Progress, "  S8: the creation budget of %v ran out: %d Pods instead of %d\n", cfg.CreateBudget, rec.Pods, cfg.Pods)
	}
	cfg.Pods = rec.Pods

	var pages [][]byte
	listRV, cont := "", ""
	for {
		req := kube.CoreV1().RESTClient().Get().Resource("pods").Param("limit", strconv.Itoa(cfg.PageSize)).SetHeader("Accept", protobufType)
		if cont != "" {
			req = req.Param("continue", cont)
		}
		body, err := req.Do(ctx).Raw()
		if err != nil {
			return nil, fmt.Errorf("listing Pods: %w", err)
		}
		env, err := projection.Unwrap(body)
		if err != nil {
			return nil, fmt.Errorf("listing Pods: %w", err)
		}
		var l corev1.PodList
		if err := l.Unmarshal(env.Raw); err != nil {
			return nil, fmt.Errorf("listing Pods: %w", err)
		}
		pages, rec.ListBytes = append(pages, body), rec.ListBytes+len(body)
		if listRV == "" {
			listRV = l.ResourceVersion
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}

	frames, err := recordWatch(ctx, kube, listRV, cfg, rec)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Progress, "  S8: recorded %d list pages (%.1f MB) and %d watch frames (%.1f MB); updates took %v\n",
		len(pages), float64(rec.ListBytes)/(1<<20), cfg.Updates, float64(len(frames))/(1<<20), rec.UpdateTime.Round(time.Millisecond))

	// Off the heap, and the expected end state from client-go's decode.
	all := offHeap(rec.ListBytes + len(frames))
	off := 0
	for _, p := range pages {
		rec.Pages = append(rec.Pages, all[off:off+len(p):off+len(p)])
		off += copy(all[off:], p)
	}
	rec.Frames = all[off : off+copy(all[off:], frames)]
	rec.Events = cfg.Updates
	pages, frames = nil, nil
	if rec.want, err = leanExpected(rec); err != nil {
		return nil, err
	}
	if len(rec.want) != cfg.Pods {
		return nil, fmt.Errorf("the recorded list holds %d Pods, want %d", len(rec.want), cfg.Pods)
	}
	return rec, nil
}

// recordWatch watches Pods from rv, makes cfg.Updates changes, and returns
// the stream's bytes once it carried that many events.
func recordWatch(ctx context.Context, kube kubernetes.Interface, rv string, cfg LeanConfig, rec *LeanRecording) ([]byte, error) {
	if cfg.Updates == 0 {
		return nil, nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := kube.CoreV1().RESTClient().Get().Resource("pods").Param("watch", "true").Param("resourceVersion", rv).
		SetHeader("Accept", protobufStream).Stream(wctx)
	if err != nil {
		return nil, fmt.Errorf("watching Pods: %w", err)
	}
	defer stream.Close()
	var (
		buf     bytes.Buffer
		readErr error
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		var size [4]byte
		for n := 0; n < cfg.Updates; n++ {
			if _, readErr = io.ReadFull(stream, size[:]); readErr != nil {
				return
			}
			buf.Write(size[:])
			if _, readErr = io.CopyN(&buf, stream, int64(binary.BigEndian.Uint32(size[:]))); readErr != nil {
				return
			}
		}
	})
	start := time.Now()
	_, err = parallel(ctx, cfg.Writers, cfg.Updates, time.Time{}, func(ctx context.Context, j int) error {
		i := j % cfg.Pods
		ns, name := fmt.Sprintf("ns-%03d", i%cfg.Namespaces), podName(i)
		pods := kube.CoreV1().Pods(ns)
		if j%2 == 0 {
			patch := fmt.Sprintf(`{"metadata":{"labels":{"revision":"%d"}}}`, j)
			_, err := pods.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			return err
		}
		ready := []string{"False", "True"}[j/cfg.Pods%2]
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"lastTransitionTime":%q}]}}`,
			ready, created.Add(time.Duration(j)*time.Second).UTC().Format(time.RFC3339))
		_, err := pods.Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	})
	if err != nil {
		cancel()
		wg.Wait()
		return nil, fmt.Errorf("changing Pods: %w", err)
	}
	wg.Wait()
	rec.UpdateTime = time.Since(start)
	if readErr != nil {
		return nil, fmt.Errorf("reading the watch after %d bytes: %w", buf.Len(), readErr)
	}
	return buf.Bytes(), nil
}

// podName is the name pod(i, ...) gives Pod i.
func podName(i int) string { return fmt.Sprintf("app-%d-7d9f8c6b5-%05d", i%50, i) }

// parallel runs fn for 0..n-1 on workers goroutines and returns the first
// error (the others stop taking work then). Past deadline (if not zero) no
// new item starts: it returns how many did, 0..k-1, all done.
func parallel(ctx context.Context, workers, n int, deadline time.Time, fn func(context.Context, int) error) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next, started atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				if ctx.Err() != nil || !deadline.IsZero() && time.Now().After(deadline) {
					return
				}
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				started.Add(1)
				if err := fn(ctx, i); err != nil {
					cancel(fmt.Errorf("item %d: %w", i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	done := int(started.Load())
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return done, err
	}
	return done, ctx.Err()
}

// leanExpected decodes the recording with client-go, whole, to learn what
// every store must hold at the end.
func leanExpected(rec *LeanRecording) (map[string]leanWant, error) {
	want := map[string]leanWant{}
	add := func(p *corev1.Pod) {
		w := leanWant{rv: p.ResourceVersion, node: p.Spec.NodeName, phase: string(p.Status.Phase), conditions: len(p.Status.Conditions),
			revision: p.Labels["revision"], labels: len(p.Labels), uid: string(p.UID)}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				w.ready = string(c.Status)
			}
		}
		want[p.Namespace+"/"+p.Name] = w
	}
	if err := clientGoList(rec, add); err != nil {
		return nil, err
	}
	return want, clientGoWatch(rec, add)
}

// clientGoList decodes the recorded list as client-go's REST client does:
// each page body (read into a fresh buffer, as the HTTP client reads it)
// through scheme.Codecs' protobuf decoder into a PodList; put gets a
// pointer to each item, as the reflector keeps them.
func clientGoList(rec *LeanRecording, put func(*corev1.Pod)) error {
	_, dec, err := clientGoDecoder()
	if err != nil {
		return err
	}
	for _, page := range rec.Pages {
		body := append([]byte(nil), page...)
		obj, _, err := dec.Decode(body, nil, &corev1.PodList{})
		if err != nil {
			return fmt.Errorf("client-go decoding a page: %w", err)
		}
		l, ok := obj.(*corev1.PodList)
		if !ok {
			return fmt.Errorf("client-go decoded a page as %T", obj)
		}
		for i := range l.Items {
			put(&l.Items[i])
		}
	}
	return nil
}

// clientGoWatch decodes the recorded frames as client-go's watch does: its
// protobuf framer and streaming decoder read each WatchEvent, then the
// object's decoder decodes the embedded Pod.
func clientGoWatch(rec *LeanRecording, put func(*corev1.Pod)) error {
	info, dec, err := clientGoDecoder()
	if err != nil {
		return err
	}
	frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(rec.Frames)))
	wd := restwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer), dec)
	for n := range rec.Events {
		typ, obj, err := wd.Decode()
		if err != nil {
			return fmt.Errorf("client-go decoding watch event %d: %w", n, err)
		}
		p, ok := obj.(*corev1.Pod)
		if typ != watch.Modified || !ok {
			return fmt.Errorf("watch event %d is %s %T, want MODIFIED *v1.Pod", n, typ, obj)
		}
		put(p)
	}
	return nil
}

// clientGoDecoder is what client-go's content negotiation picks for
// protobuf responses of core/v1.
func clientGoDecoder() (kruntime.SerializerInfo, kruntime.Decoder, error) {
	info, ok := kruntime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), protobufType)
	if !ok || info.StreamSerializer == nil {
		return info, nil, errors.New("client-go has no protobuf serializer")
	}
	return info, scheme.Codecs.WithoutConversion().DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion), nil
}

// trimPod is the TransformFunc a client-go user writes to cache what
// PodView holds: metadata without managedFields, the node, phase and
// conditions.
func trimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta}
	out.ManagedFields = nil
	out.Spec.NodeName = p.Spec.NodeName
	out.Status.Phase, out.Status.Conditions = p.Status.Phase, p.Status.Conditions
	return out
}

// projectedList decodes the recorded list as listwatch.Projected does:
// each page body (a fresh buffer) unwrapped and decoded by Plan.DecodeList.
func projectedList(rec *LeanRecording, plan *projection.Plan[*PodView], put func(*PodView)) error {
	for _, page := range rec.Pages {
		body := append([]byte(nil), page...)
		env, err := projection.Unwrap(body)
		if err != nil {
			return err
		}
		l, err := plan.DecodeList(env.Raw)
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			put(p)
		}
	}
	return nil
}

// projectedWatch decodes the recorded frames as listwatch.Projected does:
// each frame read into its own buffer, its WatchEvent read, the object
// decoded by Plan.DecodeEnvelope.
func projectedWatch(rec *LeanRecording, plan *projection.Plan[*PodView], put func(*PodView)) error {
	r := bytes.NewReader(rec.Frames)
	for n := range rec.Events {
		var size [4]byte
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return fmt.Errorf("watch frame %d: %w", n, err)
		}
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(r, frame); err != nil {
			return fmt.Errorf("watch frame %d: %w", n, err)
		}
		typ, raw, err := watchEvent(frame)
		if err != nil {
			return fmt.Errorf("watch frame %d: %w", n, err)
		}
		if watch.EventType(typ) != watch.Modified {
			return fmt.Errorf("watch event %d is %s, want MODIFIED", n, typ)
		}
		p, err := plan.DecodeEnvelope(raw)
		if err != nil {
			return fmt.Errorf("watch event %d: %w", n, err)
		}
		put(p)
	}
	return nil
}

// watchEvent reads a protobuf WatchEvent frame (type 1; object 2, a
// RawExtension whose field 1 is the object's enveloped bytes).
func watchEvent(b []byte) (typ string, raw []byte, err error) {
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", nil, protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		if wt == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, wt, b)
		}
		if n < 0 {
			return "", nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == 1 && wt == protowire.BytesType:
			typ = string(v)
		case num == 2 && wt == protowire.BytesType:
			if raw, err = rawExtension(v); err != nil {
				return "", nil, err
			}
		}
	}
	return typ, raw, nil
}

func rawExtension(b []byte) ([]byte, error) {
	var raw []byte
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num == 1 && wt == protowire.BytesType {
			raw, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, wt, b)
		}
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
	}
	return raw, nil
}

// Sides of S8 beyond ctrlkit (projection) and client-go (default).
const ClientGoTransform = "client-go + transform"

// Lean is S8: Pods cached as lean projections decoded straight from the
// wire, against client-go decoding them whole (with and without a
// TransformFunc that trims them), on bytes recorded from the real API
// server (see RecordLean). The A/A row runs ctrlkit again.
func Lean(rec *LeanRecording) Scenario {
	return Scenario{
		Name: "S8 lean objects",
		Doc: fmt.Sprintf("%d realistic Pods (with status; created in %v, changed in %v) on the embedded kube-apiserver, listed in protobuf in %d pages "+
			"(%.1f MB), then %d changes (label changes and Ready flips alternately) recorded as protobuf watch frames; "+
			"every side decodes the same recorded bytes, offline, into a map keyed by namespace/name. "+
			"ctrlkit: projection.Plan DecodeList/DecodeEnvelope into a PodView {TypeMeta, ObjectMeta, spec.nodeName, "+
			"status.phase, status.conditions}, managedFields cleared; client-go: scheme.Codecs' protobuf decoder into "+
			"corev1.Pod, kept whole (pointers into each page's items, as the reflector keeps them); client-go + transform: "+
			"the same, each Pod then trimmed to PodView's fields in a new corev1.Pod (applied page by page, which is kinder "+
			"to its peak than an informer holding the whole list first). The recording is kept off the Go heap; each page body "+
			"and watch frame is copied into a fresh buffer, as read from the network. bytes_per_object: live heap after the "+
			"list (runtime.GC twice) minus before, / N; bytes_per_object_strings_interned: the same once ctrlkit's cached "+
			"projections went through intern.Table.Object without ShareMaps (repeated strings and resource lists shared; "+
			"client-go has no interning: its sides repeat bytes_per_object; ctrlkit's watch events are then not interned); "+
			"bytes_per_object_interned: the same once interned again by a table with ShareMaps (equal label and annotation "+
			"maps shared whole too), as manager.Projection's informer does by default; list_peak_mb: highest heap objects sampled every 200µs while "+
			"decoding the list, garbage included, minus the heap before; cpu_us_per_event: process CPU decoding and "+
			"storing the watch events, over the store of N, / events.",
			rec.Pods, rec.CreateTime.Round(time.Second), rec.UpdateTime.Round(time.Second), len(rec.Pages), float64(rec.ListBytes)/(1<<20), rec.Events),
		Metrics: []Metric{
			{Name: "bytes_per_object", Unit: "B", Better: "lower"},
			{Name: "bytes_per_object_strings_interned", Unit: "B", Better: "lower"},
			{Name: "bytes_per_object_interned", Unit: "B", Better: "lower"},
			{Name: "list_peak_mb", Unit: "MB", Better: "lower"},
			{Name: "list_cpu_ms", Unit: "ms", Better: "lower"},
			{Name: "cpu_us_per_event", Unit: "µs", Better: "lower"},
		},
		Extra: []string{ClientGoTransform},
		AAOf:  Ctrlkit,
		Run: func(ctx context.Context, side string) (Result, error) {
			return runLean(rec, side)
		},
	}
}

func runLean(rec *LeanRecording, side string) (Result, error) {
	switch side {
	case Ctrlkit:
		plan, err := projection.New[*PodView, *corev1.Pod](projection.SkipManagedFields()) // as manager.Projection compiles it
		if err != nil {
			return nil, err
		}
		put := func(store map[string]*PodView) func(*PodView) {
			return func(p *PodView) { p.ManagedFields = nil; store[p.Namespace+"/"+p.Name] = p } // as the informer does
		}
		internAll := func(store map[string]*PodView, shareMaps bool) {
			t := intern.NewTable(0) // what the informer's default transform then does
			if shareMaps {
				t.ShareMaps() // the default for a projection's informer
			}
			for _, p := range store {
				t.Object(p)
			}
		}
		return measureLean(rec, internAll,
			func(store map[string]*PodView) error { return projectedList(rec, plan, put(store)) },
			func(store map[string]*PodView) error { return projectedWatch(rec, plan, put(store)) },
			func(p *PodView) leanGot {
				return leanGot{p.ResourceVersion, p.Spec.NodeName, string(p.Status.Phase), p.Status.Conditions, len(p.ManagedFields) > 0, &p.ObjectMeta}
			})
	case ClientGo, ClientGoTransform:
		put := func(store map[string]*corev1.Pod) func(*corev1.Pod) {
			if side == ClientGoTransform {
				return func(p *corev1.Pod) { p = trimPod(p); store[p.Namespace+"/"+p.Name] = p }
			}
			return func(p *corev1.Pod) { store[p.Namespace+"/"+p.Name] = p }
		}
		return measureLean(rec, nil,
			func(store map[string]*corev1.Pod) error { return clientGoList(rec, put(store)) },
			func(store map[string]*corev1.Pod) error { return clientGoWatch(rec, put(store)) },
			func(p *corev1.Pod) leanGot {
				// client-go's defaults keep managedFields; the transform drops them.
				g := leanGot{p.ResourceVersion, p.Spec.NodeName, string(p.Status.Phase), p.Status.Conditions,
					side == ClientGoTransform && len(p.ManagedFields) > 0, &p.ObjectMeta}
				if side == ClientGoTransform && (len(p.Spec.Containers) > 0 || p.Status.PodIP != "") {
					g.phase = "untrimmed"
				}
				return g
			})
	}
	return nil, fmt.Errorf("S8 has no side %q", side)
}

// leanGot is what a store holds for a Pod, for the check.
type leanGot struct {
	rv, node, phase string
	conditions      []corev1.PodCondition
	managedFields   bool
	meta            *metav1.ObjectMeta
}

// measureLean decodes the list into a fresh store, then (if set) interns
// it, then decodes the watch frames; it measures each step and checks the
// store against what client-go decoded when recording.
func measureLean[T any](rec *LeanRecording, internAll func(map[string]T, bool), list, events func(map[string]T) error, got func(T) leanGot) (Result, error) {
	before := liveHeap()
	peak := startPeakSampler()
	cpu := ProcessCPU()
	store := make(map[string]T)
	err := list(store)
	listCPU := ProcessCPU() - cpu
	heap, _ := peak.stop()
	if err != nil {
		return nil, err
	}
	listed := liveHeap()
	stringsOnly, interned := listed, listed
	if internAll != nil {
		internAll(store, false)
		stringsOnly = liveHeap()
		internAll(store, true)
		interned = liveHeap()
	}
	cpu = ProcessCPU()
	if err := events(store); err != nil {
		return nil, err
	}
	eventCPU := ProcessCPU() - cpu
	if len(store) != len(rec.want) {
		return nil, fmt.Errorf("the store holds %d Pods, want %d", len(store), len(rec.want))
	}
	for key, w := range rec.want {
		p, ok := store[key]
		if !ok {
			return nil, fmt.Errorf("the store lacks %s", key)
		}
		g := got(p)
		ready := ""
		for _, c := range g.conditions {
			if c.Type == corev1.PodReady {
				ready = string(c.Status)
			}
		}
		if g.rv != w.rv || g.node != w.node || g.phase != w.phase || len(g.conditions) != w.conditions || ready != w.ready || g.managedFields ||
			len(g.meta.Labels) != w.labels || g.meta.Labels["revision"] != w.revision || string(g.meta.UID) != w.uid {
			return nil, fmt.Errorf("the store holds %s as %+v, labels %v, uid %s; want %+v", key, g, g.meta.Labels, g.meta.UID, w)
		}
	}
	runtime.KeepAlive(store)
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	return Result{
		"bytes_per_object":                  (float64(listed) - float64(before)) / float64(rec.Pods),
		"bytes_per_object_strings_interned": (float64(stringsOnly) - float64(before)) / float64(rec.Pods),
		"bytes_per_object_interned":         (float64(interned) - float64(before)) / float64(rec.Pods),
		"list_peak_mb":                      mb(heap - min(heap, before)),
		"list_cpu_ms":                       ms(listCPU),
		"cpu_us_per_event":                  float64(eventCPU.Nanoseconds()) / 1000 / float64(max(rec.Events, 1)),
	}, nil
}
