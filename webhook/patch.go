package webhook

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
)

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// diffJSON returns the JSON patch that turns the JSON document before into
// after: objects are compared member by member, anything else (arrays
// included) is replaced whole when it differs. Members are visited in
// sorted order, so one change always gives one patch.
func diffJSON(before, after []byte) ([]patchOp, error) {
	var b, a any
	if err := json.Unmarshal(before, &b); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(after, &a); err != nil {
		return nil, err
	}
	return diffValue(nil, "", b, a), nil
}

func diffValue(ops []patchOp, path string, b, a any) []patchOp {
	bm, bok := b.(map[string]any)
	am, aok := a.(map[string]any)
	if !bok || !aok {
		if !reflect.DeepEqual(b, a) {
			ops = append(ops, patchOp{Op: "replace", Path: path, Value: a})
		}
		return ops
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
		switch {
		case !inA:
			ops = append(ops, patchOp{Op: "remove", Path: p})
		case !inB:
			ops = append(ops, patchOp{Op: "add", Path: p, Value: av})
		default:
			ops = diffValue(ops, p, bv, av)
		}
	}
	return ops
}

// escapePointer escapes a member name for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
