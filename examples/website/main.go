package main

import (
	"errors"
	"flag"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ctrlkit/ctrlkit/election"
	"github.com/ctrlkit/ctrlkit/informer"
	"github.com/ctrlkit/ctrlkit/manager"

	webv1 "example.com/website/api/v1"
)

func main() {
	directory := flag.String("directory", "websites", "namespace of the site directory")
	manager.Main(manager.Options{
		AddToScheme:    []func(*runtime.Scheme) error{webv1.AddToScheme},
		LeaderElection: election.Options{Name: "website"},
		Informers:      informer.FactoryOptions{KeepManagedFieldsOf: []string{applyOptions.FieldManager}},
	}, func(m *manager.Manager) error { return errors.Join(Setup(m, *directory), Webhooks(m)) })
}
