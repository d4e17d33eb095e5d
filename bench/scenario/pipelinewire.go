package scenario

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ctrlkit/ctrlkit/listwatch"
)

// wireInput is S1's input as the API server sends it in protobuf: the body
// of every list page and of the watch (its events framed one after the
// other), kept outside the Go heap so that neither side's collector scans
// or paces on it.
type wireInput struct {
	pages  [][]byte
	stream []byte
}

var wireCache struct {
	sync.Mutex
	key [4]int
	in  *wireInput
}

// wireInputOf encodes in once per process and size.
func wireInputOf(in *pipelineInput, cfg PipelineConfig) (*wireInput, error) {
	wireCache.Lock()
	defer wireCache.Unlock()
	key := [4]int{cfg.Objects, cfg.Events, cfg.Namespaces, cfg.PageSize}
	if wireCache.in == nil || wireCache.key != key {
		w, err := encodeWire(in, cfg)
		if err != nil {
			return nil, err
		}
		wireCache.key, wireCache.in = key, w
	}
	return wireCache.in, nil
}

// encodeWire encodes the list pages and watch events with the serializers
// kube-apiserver uses for protobuf: an object is the "k8s\x00" envelope
// around a runtime.Unknown, a list page one such object, a watch event a
// metav1.WatchEvent (raw, no envelope) holding the enveloped object, each
// event a length-prefixed frame of the watch's body.
func encodeWire(in *pipelineInput, cfg PipelineConfig) (*wireInput, error) {
	info, ok := kruntime.SerializerInfoForMediaType(clientgoscheme.Codecs.SupportedMediaTypes(), kruntime.ContentTypeProtobuf)
	if !ok || info.StreamSerializer == nil {
		return nil, errors.New("no protobuf serializer")
	}
	enc := clientgoscheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	var all bytes.Buffer
	var ends []int
	for start := 0; start < cfg.Objects; start += cfg.PageSize {
		end := min(start+cfg.PageSize, cfg.Objects)
		items := make([]corev1.ConfigMap, 0, end-start)
		for i := start; i < end; i++ {
			items = append(items, configMap(i, in.namespaces, rvString(i+1)))
		}
		cont := ""
		var remaining *int64 // as kube-apiserver: the count of what follows, on every page but the last
		if end < cfg.Objects {
			cont = strconv.Itoa(end)
			n := int64(cfg.Objects - end)
			remaining = &n
		}
		if err := enc.Encode(configMapList(items, rvString(in.listRV), cont, remaining), &all); err != nil {
			return nil, err
		}
		ends = append(ends, all.Len())
	}
	frames := info.StreamSerializer.Framer.NewFrameWriter(&all)
	var obj, event bytes.Buffer
	for k, e := range in.plan {
		cm := configMap(int(e.id), in.namespaces, rvString(in.listRV+k+1))
		obj.Reset()
		if err := enc.Encode(&cm, &obj); err != nil {
			return nil, err
		}
		event.Reset()
		we := metav1.WatchEvent{Type: string(e.typ), Object: kruntime.RawExtension{Raw: obj.Bytes()}}
		if err := info.StreamSerializer.Serializer.Encode(&we, &event); err != nil {
			return nil, err
		}
		if _, err := frames.Write(event.Bytes()); err != nil {
			return nil, err
		}
	}
	b := offHeap(all.Len())
	copy(b, all.Bytes())
	w := &wireInput{stream: b[ends[len(ends)-1]:]}
	for p, end := range ends {
		start := 0
		if p > 0 {
			start = ends[p-1]
		}
		w.pages = append(w.pages, b[start:end:end])
	}
	return w, nil
}

// wireServer answers the requests of one run from a wireInput, as
// kube-apiserver would over HTTP: GET /api/v1/configmaps with limit (the
// page size) and continue serves list pages; with watch, the first watch
// waits for gate and then streams every event, later ones nothing, and
// neither ends until its request is cancelled or its body closed (a watch
// that ended would be re-opened). Anything else, watch-list included, is
// refused with 400 and fails the run's verification.
type wireServer struct {
	in       *wireInput
	pageSize int
	gate     <-chan struct{}
	requests
	refused atomic.Int32
}

func (s *wireServer) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	q := req.URL.Query()
	if req.Method != http.MethodGet || req.URL.Path != "/api/v1/configmaps" {
		return s.refuse(req, fmt.Sprintf("%s %s is not served", req.Method, req.URL.Path))
	}
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		if q.Get("sendInitialEvents") == "true" {
			s.watchLists.Add(1)
			return s.refuse(req, "watch-list is not served: list instead")
		}
		body := &watchBody{ctx: req.Context(), closed: make(chan struct{})}
		if s.watches.Add(1) == 1 {
			select {
			case <-s.gate:
			case <-req.Context().Done():
				return nil, req.Context().Err()
			}
			body.rest = s.in.stream
		}
		return response(req, "application/vnd.kubernetes.protobuf;stream=watch", body, -1), nil
	}
	if q.Get("limit") != strconv.Itoa(s.pageSize) {
		return s.refuse(req, "limit "+q.Get("limit")+" is not served")
	}
	start := 0
	if c := q.Get("continue"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n%s.pageSize != 0 || n/s.pageSize >= len(s.in.pages) {
			return s.refuse(req, "bad continue token "+c)
		}
		start = n
	} else {
		s.lists.Add(1)
	}
	s.pages.Add(1)
	page := s.in.pages[start/s.pageSize]
	return response(req, kruntime.ContentTypeProtobuf, io.NopCloser(bytes.NewReader(page)), len(page)), nil
}

func (s *wireServer) refuse(req *http.Request, why string) (*http.Response, error) {
	s.refused.Add(1)
	resp := response(req, "text/plain", io.NopCloser(bytes.NewReader([]byte(why))), len(why))
	resp.StatusCode, resp.Status = http.StatusBadRequest, "400 Bad Request"
	return resp, nil
}

func response(req *http.Request, contentType string, body io.ReadCloser, n int) *http.Response {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {contentType}}, Body: body, ContentLength: int64(n), Request: req}
}

// checkPipeline adds the refused requests to requests' checks.
func (s *wireServer) checkPipeline(n, pageSize int) error {
	if r := s.refused.Load(); r > 0 {
		return fmt.Errorf("%d requests refused", r)
	}
	return s.requests.checkPipeline(n, pageSize)
}

// watchBody is a watch's response body: rest, then nothing until the
// request is cancelled or the body closed.
type watchBody struct {
	ctx       context.Context
	rest      []byte
	closed    chan struct{}
	closeOnce sync.Once
}

func (b *watchBody) Read(p []byte) (int, error) {
	if len(b.rest) > 0 {
		n := copy(p, b.rest)
		b.rest = b.rest[n:]
		return n, nil
	}
	select {
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	case <-b.closed:
		return 0, io.EOF
	}
}

func (b *watchBody) Close() error {
	b.closeOnce.Do(func() { close(b.closed) })
	return nil
}

// listerWatchers builds each side's usual client over s: ctrlkit's
// listwatch.Kind, as the manager does for a built-in kind, and client-go's
// clientset in protobuf, as its informer factory does; neither rate limits.
func (s *wireServer) listerWatchers() (pipelineLWs, error) {
	cfg := &rest.Config{Host: "http://wire.invalid", QPS: -1,
		ContentConfig: rest.ContentConfig{ContentType: kruntime.ContentTypeProtobuf,
			AcceptContentTypes: kruntime.ContentTypeProtobuf + "," + kruntime.ContentTypeJSON}}
	hc := &http.Client{Transport: s}
	mapper := meta.NewDefaultRESTMapper(nil)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	mapper.Add(gvk, meta.RESTScopeNamespace)
	d := listwatch.Discovery{Config: cfg, HTTPClient: hc, Mapper: staticMapper{mapper},
		Serializer: serializer.NewCodecFactory(clientgoscheme.Scheme).WithoutConversion()}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return pipelineLWs{}, err
	}
	cms := cs.CoreV1().ConfigMaps("")
	return pipelineLWs{
		ctrlkit: listwatch.Kind[*corev1.ConfigMap](d, gvk, listwatch.KindOptions{}),
		clientGo: clientGoLW{&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (kruntime.Object, error) {
				return cms.List(ctx, opts)
			},
			WatchFuncWithContext: cms.Watch,
		}},
		check: s.checkPipeline,
	}, nil
}

// staticMapper is a RESTMapper that knows its kinds from the start.
type staticMapper struct{ *meta.DefaultRESTMapper }

func (staticMapper) Reset() {}
