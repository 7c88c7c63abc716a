// Package modgraph holds the test of what a partner's module gets when it
// imports the SDK: a throwaway module importing only
// github.com/sluicehq/sluice/sdk (or its OpenTelemetry adapter) from this
// checkout, tidied, and its module graph (`go list -m all`) checked.
package modgraph
