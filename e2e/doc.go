// Package e2e holds ctrlkit's browser tests: a manager on the real API
// server, its /debug/ctrlkit page opened in headless Chromium. It is a
// module of its own so that the browser driver stays out of the root
// module's dependencies.
package e2e
