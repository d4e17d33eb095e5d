package snapshot_test

import (
	"crypto/sha256"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ctrlkit/ctrlkit/snapshot"
)

// benchObjects is 100,000 realistic ConfigMaps of about 1 KB each.
var benchObjects = sync.OnceValue(func() []*corev1.ConfigMap {
	cms := make([]*corev1.ConfigMap, 100_000)
	for i := range cms {
		cms[i] = configMap(i)
	}
	return cms
})

type codec struct {
	name   string
	encode func(*corev1.ConfigMap) ([]byte, error)
	decode func([]byte) (*corev1.ConfigMap, error)
}

func codecs() []codec {
	enc, dec := snapshot.JSON[*corev1.ConfigMap]()
	return []codec{{"json", enc, dec}, {"protobuf", marshalConfigMap, unmarshalConfigMap}}
}

// BenchmarkWrite writes a snapshot of 100,000 ConfigMaps (encoding, MACs,
// fsync and rename included); MB/s is of the file written.
func BenchmarkWrite(b *testing.B) {
	cms := benchObjects()
	for _, c := range codecs() {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "cm.snap")
			for b.Loop() {
				if err := snapshot.Write(path, testID(), "1", cms, c.encode); err != nil {
					b.Fatal(err)
				}
			}
			reportFile(b, path, len(cms))
		})
	}
}

// BenchmarkRead reads back a snapshot of 100,000 ConfigMaps (MACs and
// decoding included); "format only" decodes nothing, the cost of the file
// format and IO alone.
func BenchmarkRead(b *testing.B) {
	cms := benchObjects()
	for _, c := range codecs() {
		path := filepath.Join(b.TempDir(), "cm.snap")
		if err := snapshot.Write(path, testID(), "1", cms, c.encode); err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, got, err := snapshot.Read(b.Context(), path, testID(), c.decode); err != nil || len(got) != len(cms) {
					b.Fatal(len(got), err)
				}
			}
			reportFile(b, path, len(cms))
		})
		b.Run(c.name+"/format_only", func(b *testing.B) {
			want := testID() // the snapshot's type, read as struct{}
			want.Type = reflect.TypeFor[*corev1.ConfigMap]().String()
			want.Fingerprint = snapshot.Fingerprint(reflect.TypeFor[*corev1.ConfigMap]())
			for b.Loop() {
				if _, _, err := snapshot.Read(b.Context(), path, want, func([]byte) (struct{}, error) { return struct{}{}, nil }); err != nil {
					b.Fatal(err)
				}
			}
			reportFile(b, path, len(cms))
		})
	}
}

// BenchmarkChecksum compares SHA-256, under the format's HMACs, with CRC-32C, on 1 MiB.
func BenchmarkChecksum(b *testing.B) {
	buf := make([]byte, 1<<20)
	table := crc32.MakeTable(crc32.Castagnoli)
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			sha256.Sum256(buf)
		}
	})
	b.Run("crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			crc32.Checksum(buf, table)
		}
	})
}

func reportFile(b *testing.B, path string, n int) {
	b.Helper()
	info, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(info.Size())
	b.ReportMetric(float64(info.Size())/float64(n), "B/object")
}
