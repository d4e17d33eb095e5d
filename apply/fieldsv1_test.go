package apply

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// sameFieldSet compares a parsed field set with json.Unmarshal's, an empty
// object being nil in one and empty in the other.
func sameFieldSet(a map[string]any, b any) bool {
	bm, ok := b.(map[string]any)
	if !ok || len(a) != len(bm) {
		return false
	}
	for k, av := range a {
		bv, ok := bm[k]
		if !ok {
			return false
		}
		am, isMap := av.(map[string]any)
		if isMap && !sameFieldSet(am, bv) || !isMap && !reflect.DeepEqual(av, bv) {
			return false
		}
	}
	return true
}

// FuzzParseFieldSet: parseFieldSet accepts what json.Unmarshal into a
// map[string]any accepts, and gives the same maps.
func FuzzParseFieldSet(f *testing.F) {
	for _, s := range []string{
		`{"f:data":{".":{},"f:a":{}},"f:metadata":{"f:labels":{"f:mirrored":{}},"f:ownerReferences":{"k:{\"uid\":\"u1\"}":{}}}}`,
		`{}`, ` { "f:a" : { } } `, `{"f:\u00e9":{}}`, `{"v:\"x\"":{}}`, `{"f:a":{}`, `{"f:a":1}`, `[]`, `{"f:a":{},}`,
		`{"f:a":{}}x`, "{\"f:\x01\":{}}", `{"f:a":{},"f:a":{"f:b":{}}}`,
		`{"f:a\\b\/c\n\t\r\b\f\"":{}}`, `{"\u0041":{}}`, `{"f:\q":{}}`, `{"f:\":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := parseFieldSet(raw)
		var want map[string]any
		jerr := json.Unmarshal(raw, &want)
		if ok != (jerr == nil && want != nil) {
			t.Fatalf("%q: parseFieldSet ok = %v; encoding/json: %v, %v", raw, ok, want, jerr)
		}
		if ok && !sameFieldSet(got, want) {
			t.Fatalf("%q: parseFieldSet = %v; encoding/json: %v", raw, got, want)
		}
	})
}

// FuzzParseKeys: the keys of a "k:{...}" path element are what
// json.Unmarshal into a map[string]any gives.
func FuzzParseKeys(f *testing.F) {
	for _, s := range []string{
		`{"uid":"u1"}`, `{"name":"a","protocol":"TCP"}`, `{"containerPort":80,"protocol":"TCP"}`, ` { "a" : "b" } `,
		`{"a":"b","a":"c"}`, `{"a":"\"q\""}`, `{}`, `null`, `{"a":"b"`, `{"a":"b"}x`, `{"a":null}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		keys, ok := parseKeys(s, nil)
		var want map[string]any
		jerr := json.Unmarshal([]byte(s), &want)
		if ok != (jerr == nil) {
			t.Fatalf("%q: parseKeys ok = %v; encoding/json: %v, %v", s, ok, want, jerr)
		}
		if !ok {
			return
		}
		got := map[string]any{}
		for _, k := range keys {
			got[k.name] = k.value
		}
		if len(keys) != len(got) || len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: parseKeys = %v; encoding/json: %v", s, keys, want)
		}
	})
}

func TestParseFieldSet_boundsItsDepth(t *testing.T) {
	nested := func(depth int) []byte {
		return []byte(strings.Repeat(`{"f:a":`, depth) + "{}" + strings.Repeat("}", depth))
	}
	if _, ok := parseFieldSet(nested(maxFieldSetDepth - 1)); !ok {
		t.Errorf("a field set %d deep: not parsed", maxFieldSetDepth)
	}
	p := fieldSetParser{raw: nested(maxFieldSetDepth)}
	if _, ok := p.object(); ok {
		t.Errorf("the parser read a field set %d deep; want it to stop at %d", maxFieldSetDepth+1, maxFieldSetDepth)
	}
	if set, ok := parseFieldSet(nested(1_000_000)); ok || set != nil {
		t.Errorf("a field set 1,000,000 deep: parsed; want refused")
	}
}

// A field set parsed into an arena's maps is the one parsed without it,
// also when the arena's maps held another set before; and what the arena
// keeps after a release is bounded and empty, however large the set was.
func TestParseFieldSetInto_reusesBoundedMaps(t *testing.T) {
	var big strings.Builder
	big.WriteString(`{"f:data":{`)
	for i := range 5000 {
		if i > 0 {
			big.WriteByte(',')
		}
		fmt.Fprintf(&big, `"f:k%d":{"f:v":{}}`, i)
	}
	big.WriteString(`}}`)
	sets := [][]byte{
		[]byte(`{"f:data":{"f:a":{},"f:b":{}},"f:metadata":{"f:labels":{"f:mirrored":{}},"f:ownerReferences":{"k:{\"uid\":\"u1\"}":{}}}}`),
		[]byte(big.String()),
		[]byte(`{"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:image":{}}}}}}}`),
		[]byte(`{"f:data":{"f:a":{},"f:b":{}},"f:metadata":{"f:labels":{"f:mirrored":{}},"f:ownerReferences":{"k:{\"uid\":\"u1\"}":{}}}}`),
	}
	a := new(fieldSetArena)
	for i, raw := range sets {
		want, _ := parseFieldSet(raw)
		got, ok := parseFieldSetInto(raw, a)
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("set %d: parsed into a used arena: %v, %v; want %v", i, got, ok, want)
		}
		a.release()
		if len(a.maps) > arenaMaps || a.used != 0 {
			t.Fatalf("set %d: the arena keeps %d maps (%d lent) after release; want at most %d, none lent", i, len(a.maps), a.used, arenaMaps)
		}
		for _, m := range a.maps {
			if len(m) != 0 {
				t.Fatalf("set %d: a map kept after release holds %v", i, m)
			}
		}
		a = fieldSetArenas.Get().(*fieldSetArena) // release put it back
	}
}
