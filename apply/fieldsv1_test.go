package apply

import (
	"encoding/json"
	"reflect"
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
