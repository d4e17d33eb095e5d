package store

import "errors"

// Errors returned by the store; classify them with errors.Is. Key errors
// (an object without a name) wrap object.ErrEmptyName or
// object.ErrInvalidKey instead.
var (
	// ErrNoIndex reports a lookup in an index the store does not have.
	ErrNoIndex = errors.New("store: no such index")
	// ErrDuplicateIndex reports adding an index under a name already taken
	// (NamespaceIndex is always taken).
	ErrDuplicateIndex = errors.New("store: index already exists")
	// ErrInvalidIndex reports an index with an empty name or a nil function.
	ErrInvalidIndex = errors.New("store: invalid index")
	// ErrIndexFunc wraps the error an index function returned; the write
	// that called it changed nothing.
	ErrIndexFunc = errors.New("store: index function failed")
)
