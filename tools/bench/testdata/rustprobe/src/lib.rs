//! rustprobe: a proxy-wasm HTTP filter that does, per request, the host
//! operations its plugin configuration lists (comma-separated), named as in
//! the Go probe filter (tools/bench/testdata/probe) so that the two compare
//! row by row in the bench's callgrind section:
//!
//!   (empty)   nothing: the Rust no-op filter
//!   vmctx     a 1 s tick on the root context (as Sluice is wired)
//!   clock     one read of the wall clock (WASI clock_time_get, the one
//!             import Sluice's nowNanos calls)
//!   property  get_property(source.address)
//!   shared    get_shared_data of a 288-byte value and set_shared_data
//!             with its cas (a cas mismatch is ignored)
//!   resp3     three response headers replaced in on_http_response_headers
//!   reject    Sluice's reject path: source.address, a shared-data get (no
//!             set: a rejection changes no state), the clock, and a local
//!             429 reply with the 4 headers and the body Sluice sends with
//!             `headers: legacy`
//!
//! It is a yardstick, not a part of Sluice.

use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SHARED_KEY: &str = "rustprobe.shared";
const SHARED_SIZE: usize = 288;

// Same size as Sluice's rejection body (plugin/main.go rejectBody).
const REJECT_BODY: &[u8] =
    b"Too Many Requests: rate limit exceeded, retry after the time in Retry-After.\n";

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

#[derive(Clone, Copy, Default)]
struct Ops {
    vmctx: bool,
    clock: bool,
    property: bool,
    shared: bool,
    resp3: bool,
    reject: bool,
}

#[derive(Default)]
struct Root {
    ops: Ops,
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let cfg = self.get_plugin_configuration().unwrap_or_default();
        let cfg = match std::str::from_utf8(&cfg) {
            Ok(s) => s.to_owned(),
            Err(_) => return false,
        };
        for w in cfg.split(',').map(str::trim) {
            match w {
                "" => {}
                "vmctx" => self.ops.vmctx = true,
                "clock" => self.ops.clock = true,
                "property" => self.ops.property = true,
                "shared" => self.ops.shared = true,
                "resp3" => self.ops.resp3 = true,
                "reject" => self.ops.reject = true,
                _ => {
                    proxy_wasm::hostcalls::log(
                        LogLevel::Critical,
                        &format!("rustprobe: unknown operation {:?}", w),
                    )
                    .ok();
                    return false;
                }
            }
        }
        if self.ops.shared || self.ops.reject {
            if let (None, _) = self.get_shared_data(SHARED_KEY) {
                let _ = self.set_shared_data(SHARED_KEY, Some(&[0u8; SHARED_SIZE]), None);
            }
        }
        if self.ops.vmctx {
            self.set_tick_period(Duration::from_secs(1));
        }
        true
    }

    fn on_tick(&mut self) {}

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Filter { ops: self.ops, sink: 0 }))
    }
}

struct Filter {
    ops: Ops,
    // Keeps the results alive so that the compiler cannot drop the calls'
    // use of them.
    sink: u64,
}

impl Filter {
    fn clock(&mut self) {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        self.sink = self.sink.wrapping_add(t.as_nanos() as u64 & 1);
    }

    fn source_address(&mut self) {
        if let Some(b) = self.get_property(vec!["source", "address"]) {
            self.sink = self.sink.wrapping_add(b.len() as u64);
        }
    }
}

impl Context for Filter {}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let o = self.ops;
        if o.reject {
            self.source_address();
            if let (Some(v), _) = self.get_shared_data(SHARED_KEY) {
                self.sink = self.sink.wrapping_add(v.len() as u64);
            }
            self.clock();
            self.send_http_response(
                429,
                vec![
                    ("retry-after", "3600"),
                    ("x-ratelimit-limit", "1"),
                    ("x-ratelimit-remaining", "0"),
                    ("x-ratelimit-reset", "3600"),
                ],
                Some(REJECT_BODY),
            );
            return Action::Pause;
        }
        if o.clock {
            self.clock();
        }
        if o.property {
            self.source_address();
        }
        if o.shared {
            if let (Some(mut v), cas) = self.get_shared_data(SHARED_KEY) {
                if let Some(b) = v.first_mut() {
                    *b = b.wrapping_add(1);
                }
                let _ = self.set_shared_data(SHARED_KEY, Some(&v), cas); // a cas mismatch is fine
            }
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if self.ops.resp3 {
            self.set_http_response_header("x-ratelimit-limit", Some("1000000000"));
            self.set_http_response_header("x-ratelimit-remaining", Some("999999999"));
            self.set_http_response_header("x-ratelimit-reset", Some("1"));
        }
        Action::Continue
    }
}
