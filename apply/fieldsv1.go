package apply

import (
	"encoding/json"
	"strings"
	"sync"
)

// parseFieldSet decodes a FieldsV1 field set (an object whose values are
// objects, to any depth) into maps, as json.Unmarshal into a
// map[string]any would, without its reflection: an empty object is a nil
// map. Input it does not expect, or nested deeper than maxFieldSetDepth,
// goes to json.Unmarshal (which refuses the latter).
func parseFieldSet(raw []byte) (map[string]any, bool) { return parseFieldSetInto(raw, nil) }

// parseFieldSetInto is parseFieldSet with its maps lent by a, when not
// nil: the set is the caller's only until it releases a.
func parseFieldSetInto(raw []byte, a *fieldSetArena) (map[string]any, bool) {
	p := fieldSetParser{raw: raw, str: string(raw), arena: a} // one copy: the keys are parts of it
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

// fieldSetArena lends a parser the maps of a field set, taken back empty
// by release: Holds parses one on every call and reads it only until it
// returns, so the maps are made once per processor, not per call (an
// apply's field set is a map per object it names, ten or so).
type fieldSetArena struct {
	maps []map[string]any
	used int
}

// fieldSetArenas holds the arenas between calls.
var fieldSetArenas = sync.Pool{New: func() any { return new(fieldSetArena) }}

// Bounds on what an arena keeps between calls: a field set from anyone
// who may update the object can name millions of fields.
const (
	arenaMaps    = 64 // maps kept; a larger set's others are left to the collector
	arenaMapKeys = 32 // a map that held more is dropped, not kept at its size
)

// newMap lends an empty map.
func (a *fieldSetArena) newMap() map[string]any {
	if a.used < len(a.maps) {
		m := a.maps[a.used]
		a.used++
		return m
	}
	m := make(map[string]any, 4)
	if len(a.maps) < arenaMaps {
		a.maps = append(a.maps, m)
		a.used++
	}
	return m
}

// release empties the maps lent and returns a to the pool; nothing read
// from them may be used after.
func (a *fieldSetArena) release() {
	for i, m := range a.maps[:a.used] {
		if len(m) > arenaMapKeys {
			a.maps[i] = make(map[string]any, 4)
			continue
		}
		clear(m)
	}
	a.used = 0
	fieldSetArenas.Put(a)
}

type fieldSetParser struct {
	raw   []byte
	str   string // raw as a string, when the caller made one: keys are parts of it
	i     int
	depth int            // objects open
	arena *fieldSetArena // lends the maps when not nil
}

// maxFieldSetDepth bounds the nesting parseFieldSet reads, as the API
// server's JSON decoder and encoding/json bound theirs: a field set comes
// from anyone who may update the object, and each level is a frame of the
// parser's stack.
const maxFieldSetDepth = 10000

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
	if !p.next('{') || p.depth >= maxFieldSetDepth {
		return nil, false
	}
	p.depth++
	defer func() { p.depth-- }()
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
			if p.arena != nil {
				m = p.arena.newMap()
			} else {
				m = make(map[string]any, 4)
			}
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
				return p.text(start, p.i-1), true
			}
			if s, ok := unescape(p.raw[start : p.i-1]); ok {
				return s, true
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

// text is raw[start:end] as a string: a part of p.str when the parser has
// one (the input converted once), else a copy.
func (p *fieldSetParser) text(start, end int) string {
	if p.str != "" {
		return p.str[start:end]
	}
	return string(p.raw[start:end])
}

// unescape decodes the body of a JSON string whose escapes are the short
// ones (the quotes inside a "k:{...}" key); not ok for \u escapes and
// bytes beyond ASCII, which encoding/json decodes.
func unescape(b []byte) (string, bool) {
	var out strings.Builder // one allocation: the string is the builder's array
	out.Grow(len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c >= 0x80 {
			return "", false
		}
		if c != '\\' {
			out.WriteByte(c)
			continue
		}
		if i++; i == len(b) {
			return "", false
		}
		switch b[i] {
		case '"', '\\', '/':
			out.WriteByte(b[i])
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		default:
			return "", false
		}
	}
	return out.String(), true
}
