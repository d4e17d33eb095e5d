package foo

// Generates, from the markers on the types in api/v1alpha1 and on the
// Reconciler, the deep-copy methods (api/v1alpha1/zz_generated.deepcopy.go),
// the CRD (config/crd) and the controller's ClusterRole (config/rbac/role.yaml).
// TestGenerated_isCurrent fails when they are stale.
//
//go:generate go tool controller-gen object crd rbac:roleName=foo-controller paths=./... output:crd:artifacts:config=config/crd output:rbac:artifacts:config=config/rbac
