package webhook

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// diffJSON returns the JSON patch that turns the JSON document before into
// after, both written by encoding/json (so equal values are equal bytes):
// objects are compared member by member, a member whose bytes are equal is
// skipped without decoding it, and anything else that differs (arrays
// included) is replaced whole. Members are visited in sorted order, so one
// change always gives one patch.
func diffJSON(before, after []byte) ([]patchOp, error) {
	return diffValue(nil, "", before, after)
}

func diffValue(ops []patchOp, path string, b, a json.RawMessage) ([]patchOp, error) {
	if bytes.Equal(b, a) {
		return ops, nil
	}
	if !isObject(b) || !isObject(a) {
		return append(ops, patchOp{Op: "replace", Path: path, Value: a}), nil
	}
	var bm, am map[string]json.RawMessage
	if err := json.Unmarshal(b, &bm); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(a, &am); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(bm)+len(am))
	for k := range bm {
		keys = append(keys, k)
	}
	for k := range am {
		if _, ok := bm[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		p := path + "/" + escapePointer(k)
		bv, inB := bm[k]
		av, inA := am[k]
		var err error
		switch {
		case !inA:
			ops = append(ops, patchOp{Op: "remove", Path: p})
		case !inB:
			ops = append(ops, patchOp{Op: "add", Path: p, Value: av})
		default:
			ops, err = diffValue(ops, p, bv, av)
		}
		if err != nil {
			return nil, err
		}
	}
	return ops, nil
}

// isObject reports whether a JSON value is an object.
func isObject(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}

// escapePointer escapes a member name for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
