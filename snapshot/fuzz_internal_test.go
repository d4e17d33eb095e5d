package snapshot

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// sealed wraps a header body and records in a valid prefix and valid MACs
// under key, with the header's last 8 bytes (the records' size) set to the
// records' length, so that the fuzzer reaches the parsing behind them.
func sealed(key, headerBody, records []byte) []byte {
	headerBody = append([]byte(nil), headerBody...)
	if n := len(headerBody); n >= 8 {
		binary.BigEndian.PutUint64(headerBody[n-8:], uint64(len(records)))
	}
	b := append([]byte(magic), 0, formatVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(headerBody)))
	b = append(b, headerBody...)
	hm := headerMAC(key, b)
	b = append(append(b, hm...), records...)
	sum := newRecordsMAC(key)
	sum.Write(records)
	sum.Write(hm)
	return sum.Sum(b)
}

// FuzzRead_behindValidChecksums parses arbitrary headers and records whose
// checksums (the MACs, under the directory's key) hold: Read must refuse
// what a writer cannot produce, without panicking, and serve exactly the
// count the header promises.
func FuzzRead_behindValidChecksums(f *testing.F) {
	id := testIdentity().withType(reflectTypeRow())
	full := encodeHeader(header{id: id, rv: "9", count: 2})
	headerBody := full[prefixLen:]
	f.Add(headerBody, []byte("\x0c{\"name\":\"a\"}\x0c{\"name\":\"b\"}"))
	f.Add(headerBody, []byte("\x0c{\"name\":\"a\"}"))
	f.Add(headerBody, []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Add([]byte{}, []byte{})
	_, dec := JSON[row]()
	dir := f.TempDir()
	key, err := loadOrCreateKey(dir)
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "f.snap")
	f.Fuzz(func(t *testing.T, headerBody, records []byte) {
		data := sealed(key, headerBody, records)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rv, got, err := Read(t.Context(), path, testIdentity(), dec)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrMismatch) {
				t.Fatalf("Read = %v; want ErrCorrupt or ErrMismatch", err)
			}
			return
		}
		h, herr := decodeHeader(data[prefixLen : prefixLen+len(headerBody)])
		if herr != nil || h.rv != rv || uint64(len(got)) != h.count {
			t.Fatalf("served %q and %d objects from header %+v (%v)", rv, len(got), h, herr)
		}
	})
}
