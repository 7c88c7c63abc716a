// Package deploy holds the deployment manifests of the Sluice plugin: an
// Istio WasmPlugin (istio/), Envoy Gateway EnvoyExtensionPolicy resources
// (envoy-gateway/) and the Dockerfile of its OCI image (oci/). Its test
// parses each manifest, checks the fields those resources require and
// accept, and runs the embedded Sluice configuration through config.Parse.
// Nothing here is applied to a cluster.
package deploy
