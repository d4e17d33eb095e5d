package snapshot

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// sealed wraps a header body and records in a valid prefix and valid
// checksums, so that the fuzzer reaches the parsing behind them.
func sealed(headerBody, records []byte) []byte {
	b := append([]byte(magic), 0, formatVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(headerBody)))
	b = append(b, headerBody...)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	b = append(b, records...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// FuzzRead_behindValidChecksums parses arbitrary headers and records whose
// checksums hold: Read must refuse what a writer cannot produce, without
// panicking, and serve exactly the count the header promises.
func FuzzRead_behindValidChecksums(f *testing.F) {
	id := testIdentity().withType(reflectTypeRow())
	full := encodeHeader(header{id: id, rv: "9", count: 2})
	headerBody := full[prefixLen : len(full)-headerCRCLen]
	f.Add(headerBody, []byte("\x0c{\"name\":\"a\"}\x0c{\"name\":\"b\"}"))
	f.Add(headerBody, []byte("\x0c{\"name\":\"a\"}"))
	f.Add(headerBody, []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"))
	f.Add([]byte{}, []byte{})
	_, dec := JSON[row]()
	f.Fuzz(func(t *testing.T, headerBody, records []byte) {
		path := filepath.Join(t.TempDir(), "f.snap")
		if err := os.WriteFile(path, sealed(headerBody, records), 0o600); err != nil {
			t.Fatal(err)
		}
		rv, got, err := Read(path, testIdentity(), dec)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrMismatch) {
				t.Fatalf("Read = %v; want ErrCorrupt or ErrMismatch", err)
			}
			return
		}
		h, herr := decodeHeader(headerBody)
		if herr != nil || h.rv != rv || uint64(len(got)) != h.count {
			t.Fatalf("served %q and %d objects from header %+v (%v)", rv, len(got), h, herr)
		}
	})
}
