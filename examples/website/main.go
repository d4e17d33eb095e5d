package main

import (
	_ "embed"
	"errors"
	"flag"
	"log"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"

	webv1 "example.com/website/api/v1"
)

// role is the ClusterRole controller-gen writes from the rbac markers: what
// the controller writes, checked at start and granted by --manifests.
//
//go:embed config/rbac/role.yaml
var role []byte

func main() {
	directory := flag.String("directory", "websites", "namespace of the site directory")
	writes, err := manager.PermissionsFromRBAC(role, "")
	if err != nil {
		log.Fatal(err)
	}
	manager.Main(manager.Options{
		AddToScheme:    []func(*runtime.Scheme) error{webv1.AddToScheme},
		LeaderElection: election.Options{Name: "website"},
		Informers:      informer.FactoryOptions{KeepManagedFieldsOf: []string{applyOptions.FieldManager}},
		Permissions:    writes,
		CRDs:           CRDs,
	}, func(m *manager.Manager) error { return errors.Join(Setup(m, *directory), Webhooks(m)) })
}
