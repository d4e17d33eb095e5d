// Package internal holds what ctrlkit needs and its users do not: the
// layering test that keeps the dependency rules of ARCHITECTURE.md, and
// helpers for ctrlkit's own tests in the packages below it.
package internal
