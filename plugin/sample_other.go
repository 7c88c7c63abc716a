//go:build !wasip1

package main

import "github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

var codeDetailsPathList = []string{"response", "code_details"}

func getCodeDetails() []byte {
	b, err := proxywasm.GetProperty(codeDetailsPathList)
	if err != nil {
		return nil
	}
	return b
}
