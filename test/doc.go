// Package test holds tests that span packages: the dependency rules of the layout, and (as the
// server grows) end-to-end, multi-process cluster and fault tests.
package test
