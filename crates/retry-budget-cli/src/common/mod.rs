//! What every subcommand may use; nothing here imports from a subcommand.
//!
//! | file | job |
//! |---|---|
//! | `exit.rs` | the exit statuses, in one place |
//! | `leave.rs` | the user leaving: SIGINT, SIGTERM, SIGHUP (OS signals) |
//! | `run.rs` | the usage error, an error on one line, a command's runtime |
//! | `escape.rs` | control characters escaped in what is shown |
//! | `redact.rs` | what may be shown or logged of what the user gave: no secret |
//! | `headers.rs` | request headers given with `-H`, and the sensitive names |
//! | `url.rs` | the URL argument: checked, userinfo split off |
//! | `duration_arg.rs` | a duration flag's value |
//! | `budget_args.rs` | the budget flags, read into the core's policy |
//! | `signal_args.rs` | the response-signal flags: what a response is read for besides `Retry-After` |
//! | `tls.rs` | the client's TLS configuration |
//! | `connector.rs` | the client's HTTP(S) connector |

pub mod budget_args;
pub mod connector;
pub mod duration_arg;
pub mod escape;
pub mod exit;
pub mod headers;
pub mod idempotency;
pub mod leave;
pub mod redact;
pub mod run;
pub mod signal_args;
pub mod tls;
pub mod url;
