//! `retry-budget proxy --upstream URL`: the retry budget as a sidecar any
//! client can use, whatever its language, as a service mesh embeds such a
//! layer in its outbound path.
//!
//! Every request goes to the upstream through the same
//! `RetryBudgetLayer` as `retry-budget get`, plus what many actions share
//! (the concurrency gate, the client-wide retry budget, the shared
//! hold-off). The caller learns what happened from two response headers
//! (`retry-budget-attempts`, `retry-budget-outcome`), the upstream sees
//! each attempt's number (`retry-budget-attempt`), a request that is
//! already a proxy's retry is not retried again, a caller's deadline
//! (`grpc-timeout`, `x-envoy-upstream-rq-timeout-ms`) shrinks the budget,
//! and the admin address serves Prometheus metrics, `/ready` and `/live`.
//!
//! | file | job |
//! |---|---|
//! | `args.rs` | flags and the checked configuration |
//! | `serve.rs` | listening, serving, shutdown and drain |
//! | `conn.rs` | client connection bounds: header and idle timeouts, connection limit |
//! | `relay_body.rs` | the relayed response body: idle timeout, how it ended |
//! | `path.rs` | the upstream path: dot-segments resolved inside the prefix |
//! | `forward.rs` | one request: policy, upstream request, response headers |
//! | `stack.rs` | the client stack below the handler |
//! | `attempt.rs` | the layer below the retry layer: attempt number, deadline, span |
//! | `deadline.rs` | the caller's deadline headers |
//! | `hop.rs` | hop-by-hop fields (RFC 9110 §7.6.1) |
//! | `metrics.rs` | Prometheus metrics fed by the layer's observer |
//! | `admin.rs` | `/metrics`, `/ready`, `/live` |
//! | `log.rs` | one log line per action |

mod admin;
mod args;
mod attempt;
mod classify;
mod conn;
mod deadline;
mod forward;
mod hop;
mod log;
mod log_guard;
mod metrics;
mod path;
mod refuse;
mod relay;
mod relay_body;
mod reply;
mod serve;
mod stack;
mod start;
mod upstream;

pub use args::Args;
pub use serve::run;
