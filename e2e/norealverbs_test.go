//go:build e2e && (!cgo || verbsfake)

package e2e

// realVerbs is false: package verbs is the no-cgo stub or the fake NIC
// (verbsfake) in this binary, not libibverbs.
const realVerbs = false
