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
		{`{"list":[{"name":"a"},{"name":"b"},{"name":"c"}]}`, `{"list":[{"name":"a","x":1}]}`},
		{`{"list":[{"name":"a"}]}`, `{"list":[{"name":"a","x":1},{"name":"b"},{"name":"c"}]}`},
		{`{"list":[{"name":"a"},{"name":"b"}]}`, `{"list":[{"name":"b"},{"name":"a"}]}`},
		{`{"list":[{"name":"a"}]}`, `{"list":[{"name":"z"},{"name":"a"}]}`},
		{`{"list":[1,2,3]}`, `{"list":[1,5]}`},
		{`{"list":[[1],[2]]}`, `{"list":[[1,2],[2],[]]}`},
	} {
		ops, err := diffJSON([]byte(tc.before), []byte(tc.before), []byte(tc.after))
		if err != nil {
			t.Fatal(err)
		}
		if tc.before == tc.after && len(ops) != 0 {
			t.Errorf("%s to itself: %v, want no operation", tc.before, ops)
		}
		checkPatch(t, ops, tc.before, tc.after)
	}
}

// checkPatch applies ops to doc and compares the result with want.
func checkPatch(t *testing.T, ops []patchOp, doc, want string) {
	t.Helper()
	b, err := json.Marshal(ops)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := patch.Apply([]byte(doc))
	if err != nil {
		t.Fatalf("%s applied to %s: %v", b, doc, err)
	}
	if !jsonpatch.Equal(got, []byte(want)) {
		t.Errorf("%s applied to %s gives %s, want %s", b, doc, got, want)
	}
}

// The patch applies to the document sent, which holds what the type does
// not know and lacks what the type always writes: the first stays where
// no value is replaced whole, the second is added.
func TestDiffJSON_keepsWhatOnlyTheSentDocumentHas(t *testing.T) {
	for _, tc := range []struct{ sent, before, after, want string }{
		{ // a field of one container set: every container's unknown fields stay
			`{"spec":{"future":1,"containers":[{"name":"a","image":"x","sc":{"runAsNonRoot":true,"futureHardening":"strict"},"futureC":"keep"},{"name":"b","futureC":2}]}}`,
			`{"spec":{"containers":[{"name":"a","image":"x","sc":{"runAsNonRoot":true}},{"name":"b"}]}}`,
			`{"spec":{"containers":[{"name":"a","image":"x","sc":{"runAsNonRoot":true},"pull":"IfNotPresent"},{"name":"b"}]}}`,
			`{"spec":{"future":1,"containers":[{"name":"a","image":"x","sc":{"runAsNonRoot":true,"futureHardening":"strict"},"futureC":"keep","pull":"IfNotPresent"},{"name":"b","futureC":2}]}}`,
		},
		{ // a container appended: the others keep theirs
			`{"c":[{"name":"a","futureC":1}]}`,
			`{"c":[{"name":"a"}]}`,
			`{"c":[{"name":"a"},{"name":"side"}]}`,
			`{"c":[{"name":"a","futureC":1},{"name":"side"}]}`,
		},
		{ // a container inserted first: replaced whole, so no unknown field moves to another container
			`{"c":[{"name":"a","futureC":1}]}`,
			`{"c":[{"name":"a"}]}`,
			`{"c":[{"name":"side"},{"name":"a"}]}`,
			`{"c":[{"name":"side"},{"name":"a"}]}`,
		},
		{ // the type writes an empty struct sent did not have; the defaulter fills it
			`{"c":[{"name":"a"}]}`,
			`{"c":[{"name":"a","resources":{}}]}`,
			`{"c":[{"name":"a","resources":{"limits":{"cpu":"1"}}}]}`,
			`{"c":[{"name":"a","resources":{"limits":{"cpu":"1"}}}]}`,
		},
		{ // a member the type writes as null, sent lacks, the defaulter drops: nothing to remove
			`{"a":1}`,
			`{"a":1,"t":null}`,
			`{"a":2}`,
			`{"a":2}`,
		},
	} {
		ops, err := diffJSON([]byte(tc.sent), []byte(tc.before), []byte(tc.after))
		if err != nil {
			t.Fatal(err)
		}
		checkPatch(t, ops, tc.sent, tc.want)
	}
}
