//go:build e2e && cgo && !verbsfake

package e2e

// realVerbs says that package verbs is the cgo build over libibverbs in
// this binary (its build constraint, mirrored): the VM tests need it.
const realVerbs = true
