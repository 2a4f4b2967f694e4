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
//! One request passes through a stack of steps, each a file of one job
//! (`forward.rs` composes them):
//!
//! | file | job |
//! |---|---|
//! | `forward.rs` | one request: the steps in order, and what a worker's handlers share |
//! | `table.rs` | a worker's routes, and which one a request takes (host, path prefix) |
//! | `refuse.rs` | what is never forwarded: `CONNECT`, `OPTIONS *`, no route, a bad target, no policy |
//! | `upstream.rs` | the upstream, prepared once: the path mapped under the prefix, the forwarded head |
//! | `path.rs` | the upstream path: dot-segments resolved inside the prefix |
//! | `hop.rs` | hop-by-hop fields (RFC 9110 §7.6.1) |
//! | `classify.rs` | the per-request policy: sent once (a write, a retry of a proxy or SDK), or budgeted |
//! | `deadline.rs` | the caller's deadline headers |
//! | `fields.rs` | the caller's fields read before sending (deadline, retry numbers), in one pass |
//! | `start.rs` | an action set up: extensions, the caller's body watched, span, log guard |
//! | `relay.rs` | the action sent, its end relayed to the caller and logged |
//! | `reply.rs` | what the caller is told: the two headers, the proxy's own text responses |
//! | `relay_body.rs` | the relayed response body (idle timeout, how it ended), the caller's body |
//! | `log_guard.rs` | an action's log line, written once, also when the caller leaves |
//! | `log.rs` | one log line per action, buffered per worker |
//!
//! Around them:
//!
//! | file | job |
//! |---|---|
//! | `args.rs` | flags and the checked configuration |
//! | `route.rs` | one route, from the flags or the file, checked |
//! | `file.rs` | the config file (`--config`, `--check-config`) |
//! | `reload.rs` | each worker's table made, and made again on SIGHUP |
//! | `serve.rs` | listening, serving, shutdown and drain |
//! | `conn.rs` | client connection bounds: header and idle timeouts, connection limit |
//! | `stack.rs` | the client stack below the handler |
//! | `attempt.rs` | the layer below the retry layer: attempt number, deadline, span |
//! | `metrics.rs` | Prometheus metrics fed by the layer's observer |
//! | `pace_metrics.rs` | pacing's figures read at each scrape: the last remaining per upstream, the shared store's health |
//! | `route_metrics.rs` | a config file's routes' own series, and their health for `/ready` |
//! | `admin.rs` | `/metrics`, `/ready`, `/live` |

mod admin;
mod args;
mod attempt;
mod classify;
mod conn;
mod deadline;
mod fields;
mod file;
mod forward;
mod hop;
mod log;
mod log_guard;
mod metrics;
mod pace_metrics;
mod path;
mod refuse;
mod relay;
mod relay_body;
mod reload;
mod reply;
mod route;
mod route_metrics;
mod serve;
mod stack;
mod start;
mod table;
mod upstream;

pub use args::Args;
pub use serve::run;
