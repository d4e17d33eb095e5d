module github.com/ctrlkit/ctrlkit/bench

go 1.26.0

require (
	github.com/ctrlkit/ctrlkit v0.0.0
	k8s.io/client-go v0.36.3
)

require (
	k8s.io/api v0.36.3 // indirect
	k8s.io/apimachinery v0.36.3 // indirect
)

replace github.com/ctrlkit/ctrlkit => ../
