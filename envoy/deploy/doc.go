// Package deploy holds the deployment manifests of the Sluice plugin: an
// Istio WasmPlugin (istio/), Envoy Gateway resources (envoy-gateway/: the
// EnvoyExtensionPolicy variants, the Gateway and HTTPRoute they attach to,
// the rate-limit service's cluster, and what Envoy Gateway's standalone mode
// adds) and the Dockerfile of its OCI image (oci/). Its test parses each
// manifest, checks the fields those resources require and accept, and runs
// the embedded Sluice configuration through config.Parse. The Envoy Gateway
// files and the image are also run for real by e2e/envoygateway_test.go;
// the Istio manifest is checked against its schema only.
package deploy
