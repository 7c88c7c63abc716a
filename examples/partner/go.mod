module github.com/sluicehq/sluice/examples/partner

go 1.26.0

require github.com/sluicehq/sluice/sdk v0.0.0-00010101000000-000000000000

require github.com/cenkalti/backoff/v4 v4.3.0 // indirect

// A partner writes `go get github.com/sluicehq/sluice/sdk`; this example
// builds against the SDK of this checkout.
replace github.com/sluicehq/sluice/sdk => ../../sdk
