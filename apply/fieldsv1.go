package apply

import "encoding/json"

// parseFieldSet decodes a FieldsV1 field set (an object whose values are
// objects, to any depth) into maps, as json.Unmarshal into a
// map[string]any would, without its reflection: an empty object is a nil
// map. Input it does not expect goes to json.Unmarshal.
func parseFieldSet(raw []byte) (map[string]any, bool) {
	p := fieldSetParser{raw: raw}
	set, ok := p.object()
	if p.skipSpace(); ok && p.i == len(raw) {
		return set, true
	}
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

type fieldSetParser struct {
	raw []byte
	i   int
}

func (p *fieldSetParser) skipSpace() {
	for p.i < len(p.raw) && (p.raw[p.i] == ' ' || p.raw[p.i] == '\n' || p.raw[p.i] == '\t' || p.raw[p.i] == '\r') {
		p.i++
	}
}

// next consumes c after any space.
func (p *fieldSetParser) next(c byte) bool {
	p.skipSpace()
	if p.i < len(p.raw) && p.raw[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *fieldSetParser) object() (map[string]any, bool) {
	if !p.next('{') {
		return nil, false
	}
	if p.next('}') {
		return nil, true
	}
	var m map[string]any
	for {
		k, ok := p.key()
		if !ok || !p.next(':') {
			return nil, false
		}
		v, ok := p.object()
		if !ok {
			return nil, false
		}
		if m == nil {
			m = make(map[string]any, 4)
		}
		m[k] = v
		if p.next('}') {
			return m, true
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

// key reads a JSON string; one with escapes (the quotes inside "k:{...}")
// or bytes beyond ASCII is decoded by encoding/json.
func (p *fieldSetParser) key() (string, bool) {
	if !p.next('"') {
		return "", false
	}
	start, escaped := p.i, false
	for ; p.i < len(p.raw); p.i++ {
		switch c := p.raw[p.i]; {
		case c == '\\':
			escaped = true
			p.i++
		case c >= 0x80:
			escaped = true // encoding/json replaces invalid UTF-8
		case c < 0x20:
			return "", false
		case c == '"':
			p.i++
			if !escaped {
				return string(p.raw[start : p.i-1]), true
			}
			var s string
			if json.Unmarshal(p.raw[start-1:p.i], &s) != nil {
				return "", false
			}
			return s, true
		}
	}
	return "", false
}
