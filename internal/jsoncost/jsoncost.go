// Package jsoncost estimates, from a JSON document's bytes alone, how much
// memory decoding it into Go values may take, so that a server can refuse
// a document before decoding it. Bytes alone do not bound a decoder: each
// "{}," of three bytes in an array of structs becomes a struct of a few
// hundred bytes (a corev1.Container is 408), and a slice that grows to
// hold it doubles. The estimate charges every object and every array
// element for what decoding it allocates beyond its bytes: for
// Kubernetes' typed objects it is within a small factor of what decoding
// allocates in all (an array of empty containers allocates about four
// times its estimate, growth of the slice included, and holds less), where
// the bytes alone are hundreds of times short.
package jsoncost

// PerObject is what an object ("{") is charged beyond its bytes, and
// PerElement what each further array element or object member (",") and
// each array ("[") is: a struct or a map decoded from it, and its share of
// a slice's growth.
const (
	PerObject  = 512
	PerElement = 32
)

// Estimate returns b's bytes plus PerObject for each object and PerElement
// for each array and each comma outside strings. It reads b once and
// allocates nothing; b need not be valid JSON (a malformed document
// estimates as what it holds).
func Estimate(b []byte) int64 {
	var objects, elements int64
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{':
			objects++
		case c == '[' || c == ',':
			elements++
		}
	}
	return int64(len(b)) + objects*PerObject + elements*PerElement
}
