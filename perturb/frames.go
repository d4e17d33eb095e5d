package perturb

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// frames splits a watch stream into its events as their bytes arrive, so
// that a hold can stop a stream between two events and know the resource
// version of each (a hold from a moment lets through what the controller
// had then). It knows the API server's two encodings of a watch: protobuf
// (each event a 4-byte big-endian length and the event) and JSON (one
// object after another).
type frames struct {
	proto bool
	buf   []byte // read, not yet split off
	chunk []byte // where reads land, reused
	scan  int    // JSON: how far buf has been scanned for the end of its first object
	depth int
	inStr bool
	esc   bool
}

// newFrames returns the splitter of a stream of contentType, nil for an
// encoding it does not know (such a stream is held byte by byte).
func newFrames(contentType string) *frames {
	switch {
	case strings.HasPrefix(contentType, "application/vnd.kubernetes.protobuf"):
		return &frames{proto: true}
	case strings.HasPrefix(contentType, "application/json"):
		return &frames{}
	}
	return nil
}

// next returns the next event's bytes, as they came, and its resource
// version (math.MaxUint64 when it has none that can be read: every hold
// stops it), reading from r as needed; an error once r fails.
func (f *frames) next(r io.Reader) ([]byte, uint64, error) {
	for {
		if n := f.split(); n > 0 {
			frame := bytes.Clone(f.buf[:n])
			f.buf, f.scan = f.buf[n:], 0
			return frame, f.resourceVersion(frame), nil
		}
		if f.chunk == nil {
			f.chunk = make([]byte, 32<<10)
		}
		n, err := r.Read(f.chunk)
		f.buf = append(f.buf, f.chunk[:n]...)
		if err != nil && n == 0 {
			return nil, 0, err
		}
	}
}

// split returns the length of the first whole event in buf, 0 when it has
// not all arrived.
func (f *frames) split() int {
	if f.proto {
		if len(f.buf) < 4 {
			return 0
		}
		if n := 4 + int(binary.BigEndian.Uint32(f.buf)); len(f.buf) >= n {
			return n
		}
		return 0
	}
	for ; f.scan < len(f.buf); f.scan++ {
		c := f.buf[f.scan]
		switch {
		case f.esc:
			f.esc = false
		case f.inStr && c == '\\':
			f.esc = true
		case c == '"':
			f.inStr = !f.inStr
		case f.inStr:
		case c == '{' || c == '[':
			f.depth++
		case c == '}' || c == ']':
			if f.depth--; f.depth == 0 {
				f.scan++
				return f.scan
			}
		}
	}
	return 0
}

// resourceVersion reads an event's object's resource version; 0 for a
// bookmark, which no hold stops. A bookmark changes no object: it reaches a
// hold only once every event before it in its stream was delivered, so
// letting it through skips nothing, while holding the one that ends a
// watch-list's initial events would keep the informer from syncing at all
// (its controllers not started: another fault than stale reads).
func (f *frames) resourceVersion(frame []byte) uint64 {
	var rv string
	if f.proto {
		var bookmark bool
		rv, bookmark = protoResourceVersion(frame[4:])
		if bookmark {
			return 0
		}
	} else {
		var ev struct {
			Type   string `json:"type"`
			Object struct {
				Metadata struct {
					ResourceVersion string `json:"resourceVersion"`
				} `json:"metadata"`
			} `json:"object"`
		}
		if json.Unmarshal(frame, &ev) == nil {
			if ev.Type == string(watch.Bookmark) {
				return 0
			}
			rv = ev.Object.Metadata.ResourceVersion
		}
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return math.MaxUint64
	}
	return n
}

// protoResourceVersion reads the resource version of a protobuf watch
// event's object, and whether the event is a bookmark: the event's object
// is the "k8s\x00" envelope around a runtime.Unknown, whose bytes are the
// object; every object's field 1 is its ObjectMeta, whose field 6 is the
// resource version.
func protoResourceVersion(event []byte) (rv string, bookmark bool) {
	var ev metav1.WatchEvent
	if ev.Unmarshal(event) != nil {
		return "", false
	}
	if ev.Type == string(watch.Bookmark) {
		return "", true
	}
	raw, ok := bytes.CutPrefix(ev.Object.Raw, []byte("k8s\x00"))
	if !ok {
		return "", false
	}
	var u runtime.Unknown
	if u.Unmarshal(raw) != nil {
		return "", false
	}
	return string(protoField(protoField(u.Raw, 1), 6)), false
}

// protoField returns the bytes of the first length-delimited field num of
// a protobuf message, nil when it has none.
func protoField(msg []byte, num protowire.Number) []byte {
	for len(msg) > 0 {
		n, typ, l := protowire.ConsumeTag(msg)
		if l < 0 {
			return nil
		}
		msg = msg[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(msg)
			if l < 0 {
				return nil
			}
			return v
		}
		l = protowire.ConsumeFieldValue(n, typ, msg)
		if l < 0 {
			return nil
		}
		msg = msg[l:]
	}
	return nil
}
