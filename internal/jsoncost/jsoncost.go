// Package jsoncost estimates, from a JSON document's bytes alone, how much
// memory decoding it into Go values may take, so that a server can refuse
// a document before decoding it. Bytes alone do not bound a decoder: each
// element of an array of structs becomes a struct of a few hundred bytes
// (a corev1.Container is 408) whatever it holds, "{}", null or a number
// of the wrong type alike, and a slice that grows to hold it doubles. The
// estimate charges every array element and every object for what decoding
// it allocates beyond its bytes: for Kubernetes' typed objects it is within
// a small factor of what decoding allocates in all (an array of empty
// containers allocates about four times its estimate, growth of the slice
// included, and holds less), where the bytes alone are hundreds of times
// short. A managedFields entry's fieldsV1 is decoded as raw bytes, so its
// nested objects are charged as bytes only.
package jsoncost

// PerValue is what an array element or an object outside an array is
// charged beyond its bytes (a struct or a map decoded from it, and its
// share of a slice's growth), and PerMember what each object member after
// the first is (a map entry or a field).
const (
	PerValue  = 512
	PerMember = 32
)

// rawKey is the field whose object value is decoded as raw bytes.
const rawKey = "fieldsV1"

// Estimate returns b's bytes plus PerValue for each array element and each
// object outside an array, and PerMember for each further object member,
// outside strings and outside fieldsV1's objects. It reads b once and
// allocates nothing for documents nested less than 64 deep; b need not be
// valid JSON (a malformed document estimates as what it holds).
func Estimate(b []byte) int64 {
	var (
		values, members int64
		stackBuf        [64]bool // true: an array
		stack           = stackBuf[:0]
		needElement     bool   // just after "[" or an array's ",": the next value is an element
		raw             int    // depth inside a fieldsV1 object
		lastString      []byte // the last string's text, for a key
		rawNext         bool   // the last key was fieldsV1
	)
	inArray := func() bool { return len(stack) > 0 && stack[len(stack)-1] }
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '"' { // a string: skip to its end
			start := i + 1
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			lastString = b[start:min(i, len(b))]
			if raw == 0 && needElement {
				values++
				needElement = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		if raw > 0 {
			switch c {
			case '{', '[':
				raw++
			case '}', ']':
				raw--
			}
			continue
		}
		if needElement && c != ']' {
			values++ // an element, whatever it is
			needElement = false
		}
		switch c {
		case ':':
			rawNext = string(lastString) == rawKey
			continue
		case '{':
			if rawNext {
				raw, rawNext = 1, false
				continue
			}
			if !inArray() {
				values++
			}
			stack = append(stack, false)
		case '[':
			stack = append(stack, true)
			needElement = true
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			needElement = false
		case ',':
			if inArray() {
				needElement = true
			} else {
				members++
			}
		}
		rawNext = false
	}
	return int64(len(b)) + values*PerValue + members*PerMember
}

// MaxEstimate is the most Estimate returns for n bytes: each byte starts at
// most one value or member. A caller with a bound above it need not read
// the document (a listwatch does not, for the small objects of a watch).
func MaxEstimate(n int) int64 { return int64(n) * (1 + PerValue) }
