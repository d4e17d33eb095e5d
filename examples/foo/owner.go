package foo

import (
	appsv1 "k8s.io/api/apps/v1"

	"github.com/ctrlkit/ctrlkit/handler"
	"github.com/ctrlkit/ctrlkit/object"
)

// EnqueueOwner returns a Deployment handler that queues the key of the Foo
// controlling the Deployment, so a Deployment that is changed or deleted by
// someone else is put right. An ownership change queues both owners.
func EnqueueOwner(q handler.Adder[string]) handler.Handler[*appsv1.Deployment] {
	add := func(d *appsv1.Deployment) {
		if k, ok := OwnerKey(d); ok {
			q.Add(k)
		}
	}
	return handler.Funcs[*appsv1.Deployment]{
		AddFunc:    func(d *appsv1.Deployment, _ bool) { add(d) },
		UpdateFunc: func(old, new *appsv1.Deployment) { add(old); add(new) },
		DeleteFunc: func(d object.Deleted[*appsv1.Deployment]) {
			if d.HasObj {
				add(d.Obj)
			}
		},
	}
}
