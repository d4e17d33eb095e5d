package snapshot_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ctrlkit/ctrlkit/snapshot"
)

// An informer writes its cache at shutdown and, at the next start, watches
// from the snapshot's resource version if the snapshot is of what it watches;
// otherwise it lists as usual.
func Example() {
	dir, err := os.MkdirTemp("", "snapshot-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "configmaps.snap")

	type ConfigMap struct {
		Name string            `json:"name"`
		Data map[string]string `json:"data"`
	}
	id := snapshot.Identity{Cluster: "kube-system-uid", Version: "v1", Resource: "configmaps", Namespace: "shop"}
	encode, decode := snapshot.JSON[ConfigMap]()

	cache := []ConfigMap{{Name: "web", Data: map[string]string{"color": "blue"}}}
	if err := snapshot.Write(path, id, "1234", cache, encode); err != nil {
		fmt.Println(err)
		return
	}

	rv, objects, err := snapshot.Read(context.TODO(), path, id, decode)
	fmt.Println(rv, objects, err)

	other := id
	other.Namespace = "billing"
	_, _, err = snapshot.Read(context.TODO(), path, other, decode)
	var mismatch *snapshot.MismatchError
	if errors.As(err, &mismatch) {
		fmt.Println(errors.Is(err, snapshot.ErrMismatch), mismatch.Field, mismatch.Snapshot, mismatch.Want)
	}

	_, _, err = snapshot.Read(context.TODO(), filepath.Join(dir, "none.snap"), id, decode)
	fmt.Println(errors.Is(err, snapshot.ErrNotFound))
	// Output:
	// 1234 [{web map[color:blue]}] <nil>
	// true Namespace shop billing
	// true
}

// ReadEach hands the objects over in batches as they decode, after the
// identity and the MACs have been checked, so that a cache can apply
// some while the next decode.
func ExampleReadEach() {
	dir, err := os.MkdirTemp("", "snapshot-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "configmaps.snap")

	type ConfigMap struct {
		Name string `json:"name"`
	}
	id := snapshot.Identity{Cluster: "kube-system-uid", Version: "v1", Resource: "configmaps"}
	encode, decode := snapshot.JSON[ConfigMap]()
	objects := make([]ConfigMap, 1200)
	for i := range objects {
		objects[i].Name = fmt.Sprintf("cm-%04d", i)
	}
	if err := snapshot.Write(path, id, "77", objects, encode); err != nil {
		fmt.Println(err)
		return
	}

	cache := map[string]ConfigMap{}
	err = snapshot.ReadEach(context.TODO(), path, id, decode, func(rv string, count int) error {
		fmt.Println("resource version", rv, "objects", count)
		return nil
	}, func(batch []ConfigMap) error {
		for _, cm := range batch {
			cache[cm.Name] = cm
		}
		return nil
	})
	fmt.Println(len(cache), err)
	// Output:
	// resource version 77 objects 1200
	// 1200 <nil>
}
