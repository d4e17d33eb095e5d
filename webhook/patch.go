package webhook

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// patchOp is one operation of a JSON patch (RFC 6902).
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// diffJSON returns the JSON patch that turns sent, the document a request
// sent, into after: before and after are the object decoded from sent and
// then defaulted, both written by encoding/json (so equal values are
// equal bytes), and the patch holds what differs between them. Objects
// are compared member by member, a member whose bytes are equal skipped
// without decoding it; arrays element by element where their elements
// correspond (see diffArray); anything else that differs is replaced
// whole. What the type does not know (a newer server's fields) is in sent
// only, and stays as sent wherever the patch does not replace a value
// whole; what the type writes but sent lacks (an empty struct, a null
// time) is added, not replaced, so the patch applies to sent. Members are
// visited in sorted order, so one change always gives one patch.
func diffJSON(sent, before, after []byte) ([]patchOp, error) {
	return diffValue(nil, "", sent, before, after)
}

// diffValue appends the operations turning b into a at path; s is the
// value at path in the document sent, nil when it has none.
func diffValue(ops []patchOp, path string, s, b, a json.RawMessage) ([]patchOp, error) {
	switch {
	case bytes.Equal(b, a):
		return ops, nil
	case s == nil:
		return append(ops, patchOp{Op: "add", Path: path, Value: a}), nil // add sets a member that is there too
	case isArray(b) && isArray(a) && isArray(s):
		return diffArray(ops, path, s, b, a)
	case !isObject(b) || !isObject(a) || !isObject(s):
		return append(ops, patchOp{Op: "replace", Path: path, Value: a}), nil
	}
	var sm, bm, am map[string]json.RawMessage
	for _, d := range []struct {
		raw json.RawMessage
		m   *map[string]json.RawMessage
	}{{s, &sm}, {b, &bm}, {a, &am}} {
		if err := json.Unmarshal(d.raw, d.m); err != nil {
			return nil, err
		}
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
		sv, inS := sm[k]
		if !inS {
			sv = nil
		}
		var err error
		switch {
		case !inA && inS:
			ops = append(ops, patchOp{Op: "remove", Path: p})
		case !inA: // the type wrote it, sent did not have it: nothing to remove
		case !inB:
			ops = append(ops, patchOp{Op: "add", Path: p, Value: av})
		default:
			ops, err = diffValue(ops, p, sv, bv, av)
		}
		if err != nil {
			return nil, err
		}
	}
	return ops, nil
}

// diffArray is diffValue of two arrays, s the one sent. Where the elements
// before and after share correspond one for one (see correspond) and sent
// has as many as before, it patches them in place and adds or removes the
// elements after them: a defaulter that sets a field of one container
// patches that field, and the unknown fields of every container stay as
// sent. Otherwise (an element inserted before others, elements reordered)
// it replaces the array whole: patching in place would leave one element's
// unknown fields on another.
func diffArray(ops []patchOp, path string, s, b, a json.RawMessage) ([]patchOp, error) {
	var ss, bs, as []json.RawMessage
	for _, d := range []struct {
		raw json.RawMessage
		l   *[]json.RawMessage
	}{{s, &ss}, {b, &bs}, {a, &as}} {
		if err := json.Unmarshal(d.raw, d.l); err != nil {
			return nil, err
		}
	}
	whole := append(ops, patchOp{Op: "replace", Path: path, Value: a})
	if len(ss) != len(bs) {
		return whole, nil
	}
	shared := min(len(bs), len(as))
	for i := range shared {
		if bytes.Equal(bs[i], as[i]) {
			continue // unchanged: the same element
		}
		same, err := correspond(bs[i], as[i])
		if err != nil {
			return nil, err
		}
		if !same {
			return whole, nil
		}
	}
	var err error
	for i := range shared {
		if ops, err = diffValue(ops, path+"/"+strconv.Itoa(i), ss[i], bs[i], as[i]); err != nil {
			return nil, err
		}
	}
	for i := shared; i < len(as); i++ {
		ops = append(ops, patchOp{Op: "add", Path: path + "/" + strconv.Itoa(i), Value: as[i]})
	}
	for i := len(bs) - 1; i >= shared; i-- { // from the end: each removal leaves the indexes before it
		ops = append(ops, patchOp{Op: "remove", Path: path + "/" + strconv.Itoa(i)})
	}
	return ops, nil
}

// correspond reports whether two array elements are the same element as
// the object's arrays name them: two objects with the same "name" member
// (containers, volumes, env, ports: the lists merged by name), or without
// one either; two values of other kinds always (patching one replaces it
// whole).
func correspond(b, a json.RawMessage) (bool, error) {
	if !isObject(b) || !isObject(a) {
		return true, nil
	}
	var bn, an struct {
		Name json.RawMessage `json:"name"`
	}
	if err := json.Unmarshal(b, &bn); err != nil {
		return false, err
	}
	if err := json.Unmarshal(a, &an); err != nil {
		return false, err
	}
	return bytes.Equal(bn.Name, an.Name), nil
}

// isArray reports whether a JSON value is an array.
func isArray(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '['
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
