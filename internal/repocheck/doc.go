// Package repocheck holds tests of the repository itself: that `make fuzz`
// runs every fuzzer, and that nothing refers to files outside the checkout.
package repocheck
