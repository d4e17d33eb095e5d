// Package wire measures what decoding costs in each wire format the API
// server speaks for built-in types, through the codec client-go's REST
// clients (and so ctrlkit's informers and clients) use: a list page and a
// watch event's object, JSON against protobuf.
package wire

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/ctrlkit/ctrlkit/bench/scenario"
)

// page is one list page of 500 realistic Pods, as the API server pages.
func page() *corev1.PodList {
	l := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "12345", Continue: "next"}}
	for i := range 500 {
		l.Items = append(l.Items, scenario.Pod(i, 20))
	}
	return l
}

// encoded returns obj in the wire format of mediaType, as the server sends it.
func encoded(tb testing.TB, mediaType string, obj runtime.Object) []byte {
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), mediaType)
	if !ok {
		tb.Fatalf("no serializer for %s", mediaType)
	}
	enc := scheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion)
	b, err := runtime.Encode(enc, obj)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var formats = []struct{ name, mediaType string }{
	{"json", runtime.ContentTypeJSON},
	{"protobuf", runtime.ContentTypeProtobuf},
}

// BenchmarkDecodePodList decodes a page of 500 Pods: the cost of a list, per
// page (divide by 500 for one object).
func BenchmarkDecodePodList(b *testing.B) {
	l := page()
	codecs := serializer.NewCodecFactory(scheme.Scheme).WithoutConversion()
	for _, f := range formats {
		data := encoded(b, f.mediaType, l)
		info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), f.mediaType)
		dec := codecs.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				obj, _, err := dec.Decode(data, nil, nil)
				if err != nil || len(obj.(*corev1.PodList).Items) != 500 {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodePod decodes one Pod, as a watch event carries it.
func BenchmarkDecodePod(b *testing.B) {
	p := scenario.Pod(7, 20)
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	codecs := serializer.NewCodecFactory(scheme.Scheme).WithoutConversion()
	for _, f := range formats {
		data := encoded(b, f.mediaType, &p)
		info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), f.mediaType)
		dec := codecs.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion)
		b.Run(f.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := dec.Decode(data, nil, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFormats_decodeToTheSamePods checks that both encodings carry the same
// objects, so the benchmarks compare like with like.
func TestFormats_decodeToTheSamePods(t *testing.T) {
	l := page()
	codecs := serializer.NewCodecFactory(scheme.Scheme).WithoutConversion()
	var got []*corev1.PodList
	for _, f := range formats {
		info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), f.mediaType)
		obj, _, err := codecs.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion).Decode(encoded(t, f.mediaType, l), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, obj.(*corev1.PodList))
	}
	if len(got[0].Items) != 500 || len(got[1].Items) != 500 {
		t.Fatalf("items %d and %d, want 500", len(got[0].Items), len(got[1].Items))
	}
	for i := range got[0].Items {
		a, b := got[0].Items[i], got[1].Items[i]
		if a.Name != b.Name || a.Spec.Containers[0].Image != b.Spec.Containers[0].Image || len(a.Labels) != len(b.Labels) ||
			a.Status.Phase != b.Status.Phase {
			t.Fatalf("item %d differs between JSON and protobuf", i)
		}
	}
}
