// Package snapshot writes an informer's cache to a file and reads it back,
// the groundwork of a warm restart: at the next start an informer loads a
// snapshot that matches what it is about to watch and watches from the
// snapshot's resource version instead of listing everything again.
//
// A snapshot holds the objects, the resource version they are current at and
// an Identity: what the data is of (the cluster, the server, the resource, the
// namespace, the selectors, the shard ranges, the Go type and a fingerprint of
// its structure). Read serves a snapshot only if it is authentic, every field
// of its identity equals the one wanted and every byte is intact; otherwise it
// refuses with an error that says why and classifies it:
//
//	ErrNotFound   no file at the path (a cold start, not a failure)
//	ErrMismatch   an authentic header names another identity (a *MismatchError names the field)
//	ErrCorrupt    not a snapshot, another format version, a MAC that does not hold
//	              (damaged, or written without the key), a size other than the
//	              header says, an object that does not decode
//	ErrUntrusted  a directory, file or key that another user could have made or
//	              changed, a link or a FIFO: refused unread
//
// A damaged or foreign snapshot is never served in part: Read and ReadEach
// hand over objects only after the identity and the MAC over the whole
// file have been verified (a large snapshot's objects decode while the
// MAC is computed, on the other cores; a decoder that panics on
// damaged bytes is an object that does not decode rather than a crash,
// though a decoder must still return on any input). ReadEach hands them
// over in batches as they decode (an informer applies some while the next
// decode), so what ends it
// after the MAC (an object its decoder refuses, records that do not add
// up in a file Write did not write, a read error) comes after some batches;
// Read then returns no objects. Both stop when their context ends.
//
// # What is trusted on disk
//
// A snapshot becomes the cache, which controllers read as if it were listed
// from the server, so only what this process's user wrote is read. The
// directory must be the user's and writable by no one else; Read and Write
// check it. PrepareDir picks it from the one configured: that one itself,
// or, when other users can write it (an emptyDir volume's mount point,
// /tmp), a private folder "ctrlkit-<uid>" that it makes inside, refusing
// a link or another user's folder at that name. The folders above are not
// checked, unlike the API server's data directory (see package apiserver):
// another user who can rename entries there can make the caches start
// cold, but not have a snapshot served that this user did not write,
// because of what follows (PrepareDir says why). A file is opened without following a symbolic link and without
// waiting (a FIFO cannot hang a reader), and read only if it is a regular
// file of the user that no one else can write. Each directory has a key,
// KeyFile: 32 random bytes, mode 0600, made by the first Write into the
// directory (with O_EXCL, then linked into place) and refused when it is
// not a regular file of the user that only the user can read. The header
// and the whole file carry HMAC-SHA256 MACs under it, so that a file
// written without the key (by another user, or by an older ctrlkit) is
// refused. The header says how long the records are, and a file of another
// size is refused before they are read: a reader allocates no more than
// the objects need. No error quotes the file's bytes, which may be a
// secret that a link led to (an error of the caller's decode function is
// passed on as it wrote it).
//
// # File format (version 2)
//
//	magic "CKSNAPv\x00" (8 bytes) · format version (uint16, big endian) ·
//	header length (uint32, big endian) · header ·
//	header MAC: HMAC-SHA256 under the key of the label
//	  "ctrlkit snapshot header v2\x00" and all before it (32 bytes) ·
//	records: for each object, its length (uvarint) and its bytes ·
//	trailer: HMAC-SHA256 under the key of the label
//	  "ctrlkit snapshot records v2\x00", the records and the header MAC (32 bytes)
//
// The header is the identity's fields, then the resource version, each a
// uvarint length and the bytes, then the object count and the records'
// length in bytes (uint64, big endian each; the writer fills in the length
// after the records). The header has a MAC of its own so that it is
// authenticated before anything in it is used: a damaged header is
// reported as ErrCorrupt rather than as a misleading ErrMismatch, and no
// count or length that another writer chose sizes an allocation. The
// trailer decides whether anything is served: a corruption that slipped
// through would be served as the cache, with nothing afterwards to notice
// it (an object that the watch never touches again stays wrong);
// HMAC-SHA256 makes that chance negligible, as version 1's SHA-256 did, and
// unlike it cannot be computed without the key. With the CPU's SHA
// instructions it costs little beside decoding the objects (see the
// benchmarks). A file of version 1 (no key) is refused as ErrCorrupt
// naming its version: an informer starts cold once and writes version 2.
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
// read (so decode must be safe for concurrent use); until the MAC is
// verified, the objects decoded so far are kept too (at most the whole
// snapshot's, what the caller holds once they are handed over).
package snapshot
