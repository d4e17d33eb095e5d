package snapshot

import "encoding/json"

// JSON returns encode and decode functions for Write and Read that use
// encoding/json. For T a pointer type, decode allocates a new value.
// Protobuf is smaller and faster for built-in types: pass
// func(c *corev1.ConfigMap) ([]byte, error) { return c.Marshal() } and its
// Unmarshal counterpart instead.
func JSON[T any]() (encode func(T) ([]byte, error), decode func([]byte) (T, error)) {
	encode = func(obj T) ([]byte, error) { return json.Marshal(obj) }
	decode = func(b []byte) (T, error) {
		var obj T
		err := json.Unmarshal(b, &obj)
		return obj, err
	}
	return encode, decode
}
