//go:build !wasip1

package main

import (
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
)

// The SDK's equivalents of hostcall_wasip1.go, so that the package builds
// (and vets) natively; the plugin only ever runs as wasip1.

func nowNanos() int64 { return time.Now().UnixNano() }

var sourceAddressPathList = []string{"source", "address"}

func getSourceAddress() []byte {
	b, err := proxywasm.GetProperty(sourceAddressPathList)
	if err != nil {
		return nil
	}
	return b
}

func sendLocalResponse(status uint32, headers [][2]string, body []byte) error {
	return proxywasm.SendHttpResponse(status, headers, body, -1)
}
