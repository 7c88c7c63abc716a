module github.com/sluicehq/sluice/sdk

go 1.23

require github.com/cenkalti/backoff/v4 v4.3.0
