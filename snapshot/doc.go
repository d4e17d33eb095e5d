// Package snapshot writes an informer's cache to a file and reads it back,
// the groundwork of a warm restart: at the next start an informer loads a
// snapshot that matches what it is about to watch and watches from the
// snapshot's resource version instead of listing everything again.
//
// A snapshot holds the objects, the resource version they are current at and
// an Identity: what the data is of (the cluster, the server, the resource, the
// namespace, the selectors, the shard ranges, the Go type and a fingerprint of
// its structure). Read serves a snapshot only if every field of its identity
// equals the one wanted and every byte is intact; otherwise it refuses with an
// error that says why and classifies it:
//
//	ErrNotFound   no file at the path (a cold start, not a failure)
//	ErrMismatch   a trusted header names another identity (a *MismatchError names the field)
//	ErrCorrupt    bad magic, unknown format version, a bad checksum, a truncated
//	              or overlong file, an object that does not decode
//
// A damaged or foreign snapshot is never served in part: Read and ReadEach
// hand over objects only after the identity and the checksum over the whole
// file have been verified (a large snapshot's objects decode while the
// checksum is computed, on the other cores; a decoder that panics on
// damaged bytes is an object that does not decode rather than a crash,
// though a decoder must still return on any input). ReadEach hands them
// over in batches as they decode (an informer applies some while the next
// decode), so what ends it
// after the checksum (an object its decoder refuses, records that do not add
// up in a file Write did not write, a read error) comes after some batches;
// Read then returns no objects.
//
// # File format (version 1)
//
//	magic "CKSNAPv\x00" (8 bytes) · format version (uint16, big endian) ·
//	header length (uint32, big endian) · header · CRC-32C of all before it (uint32) ·
//	records: for each object, its length (uvarint) and its bytes ·
//	SHA-256 of everything before it (32 bytes)
//
// The header is the identity's fields, then the resource version, each a
// uvarint length and the bytes, then the object count (uvarint). The header
// has a checksum of its own so that a damaged header is reported as
// ErrCorrupt rather than as a misleading ErrMismatch; the trailer decides
// whether anything is served. It is SHA-256 rather than CRC-32C because a
// corruption that slipped through would be served as the cache, with nothing
// afterwards to notice it (an object that the watch never touches again stays
// wrong); SHA-256 makes that chance negligible and, with the CPU's SHA
// instructions, costs little beside decoding the objects (see the benchmarks).
//
// Write is atomic: it writes a temporary file in the same directory, syncs
// it, renames it over the path and syncs the directory, so a crash at any
// point leaves either the previous snapshot or the new one, never a mix.
//
// Inputs and outputs: Write takes objects and an encode function (JSON[T] for
// any type, or a protobuf Marshal for built-in types); Read takes a decode
// function and returns the resource version and the objects; ReadEach
// takes the same and calls back with the version, then with each batch.
//
// Concurrency: the functions hold no state and are safe for concurrent use
// on different paths. Concurrent Writes to one path are safe (each renames a
// complete file; the last rename wins); Read is safe beside a Write. Reads
// stream: besides the decoded objects they hold one object's bytes at a
// time, or, for a snapshot of 2048 objects or more with GOMAXPROCS above
// one, about 3×GOMAXPROCS chunks of 512 objects read ahead and as many
// spare chunk buffers, decoded on GOMAXPROCS goroutines while the file is
// read (so decode must be safe for concurrent use); until the checksum is
// verified, the objects decoded so far are kept too (at most the whole
// snapshot's, what the caller holds once they are handed over).
package snapshot
