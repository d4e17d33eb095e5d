package webhook

import (
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
)

func TestDiffJSON_thePatchTurnsBeforeIntoAfter(t *testing.T) {
	for _, tc := range []struct{ before, after string }{
		{`{}`, `{}`},
		{`{"a":1}`, `{"a":2}`},
		{`{"a":1}`, `{}`},
		{`{}`, `{"a":{"b":[1,2]}}`},
		{`{"a":{"b":[1,2],"c":"x"}}`, `{"a":{"b":[1,3],"c":"x"}}`},
		{`{"a":null}`, `{"a":{"b":true}}`},
		{`{"a":{"b":true}}`, `{"a":"flat"}`},
		{`{"m":{"a/b~c":"x","keep":1}}`, `{"m":{"a/b~c":"y","keep":1,"new~/":[]}}`},
		{`{"list":[{"name":"a"},{"name":"b"}]}`, `{"list":[{"name":"a"}]}`},
	} {
		ops, err := diffJSON([]byte(tc.before), []byte(tc.after))
		if err != nil {
			t.Fatal(err)
		}
		if tc.before == tc.after && len(ops) != 0 {
			t.Errorf("%s to itself: %v, want no operation", tc.before, ops)
		}
		b, err := json.Marshal(ops)
		if err != nil {
			t.Fatal(err)
		}
		patch, err := jsonpatch.DecodePatch(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := patch.Apply([]byte(tc.before))
		if err != nil {
			t.Fatalf("%s applied to %s: %v", b, tc.before, err)
		}
		if !jsonpatch.Equal(got, []byte(tc.after)) {
			t.Errorf("%s applied to %s gives %s, want %s", b, tc.before, got, tc.after)
		}
	}
}
