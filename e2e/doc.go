// Package e2e holds the end-to-end tests that run a real Envoy (see the
// envoytest harness in internal/envoytest). Without Envoy they skip, unless the
// environment variable CI is set, in which case they fail.
package e2e
