//! The flags of `retry-budget proxy`, and the configuration they make.
//!
//! Everything is checked before anything listens: a bad value is one line
//! naming the flag (exit status 2), never a panic or a proxy that starts
//! and then refuses every request.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::route::{
    parse_idempotent_path, parse_pace_header, Match, PaceHeader, RouteConfig, RouteSpec,
};
use super::upstream::Upstream;
use crate::common::budget_args::BudgetArgs;
use crate::common::duration_arg;

/// The arguments of `retry-budget proxy`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where every request goes: `http://host:port` or `https://host:port`,
    /// optionally with a path prefix (`http://api:8080/v1`).
    /// Required unless `--config` gives the routes.
    #[arg(
        long,
        value_name = "URL",
        value_parser = Upstream::parse,
        required_unless_present_any = ["config", "check_config"]
    )]
    upstream: Option<Upstream>,
    /// Serve the listeners, limits and routes of this TOML file instead of
    /// the flags (which it conflicts with); SIGHUP reads it again.
    #[arg(long, value_name = "FILE", conflicts_with_all = ROUTE_FLAGS)]
    config: Option<PathBuf>,
    /// Check this config file, print the routes it would serve, and exit:
    /// 0 if it is valid, 2 if not.
    #[arg(long, value_name = "FILE", conflicts_with_all = ROUTE_FLAGS, conflicts_with = "config")]
    check_config: Option<PathBuf>,
    /// The address to serve HTTP/1.1 and h2c on. Loopback unless you ask for
    /// another address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:15001")]
    listen: SocketAddr,
    /// The admin address: /metrics (Prometheus text), /ready, /live.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:15002")]
    admin: SocketAddr,
    /// At most N upstream attempts in flight; more queue. An action waiting
    /// between attempts holds no slot. Unlimited if not given.
    #[arg(long, value_name = "N")]
    concurrency: Option<NonZeroUsize>,
    /// Client-wide retry budget: retries may be this percentage of first
    /// attempts (over a 10 s window) ...
    #[arg(long, value_name = "PERCENT", default_value_t = 20)]
    retry_ratio: u32,
    /// ... plus this many retries per second in reserve.
    #[arg(long, value_name = "N", default_value_t = 10)]
    retry_reserve: u32,
    /// Turn the client-wide retry budget off (each action keeps its own).
    #[arg(long)]
    no_client_budget: bool,
    /// Turn the shared hold-off off: a Retry-After then holds back only the
    /// action that received it, not later first attempts to the upstream.
    #[arg(long)]
    no_hold_off: bool,
    /// Share the hold-off with every proxy using this Redis
    /// (`redis://HOST:PORT`): a Retry-After seen through one holds the first
    /// attempts through all. No request waits for Redis; while it is
    /// unavailable each proxy goes on with its own map.
    #[arg(long, value_name = "URL", conflicts_with = "no_hold_off")]
    hold_off_redis: Option<String>,
    /// The namespace of the shared hold-off: only proxies with the same one
    /// share (a tenant, or a hash of the API token; never the token itself).
    #[arg(long, value_name = "NAME", requires = "hold_off_redis")]
    hold_off_namespace: Option<String>,
    /// Turn pacing off: first attempts no longer wait for the quota the
    /// upstream announces on its responses (`RateLimit`,
    /// `X-RateLimit-Remaining`/`-Reset`, the AI providers' headers), and
    /// the 429s it would have spared are spent.
    #[arg(long)]
    no_pace: bool,
    /// Also pace by an operator-named pair of headers: the remaining count
    /// and the reset, in the format named (`x-remaining,x-reset=unix`).
    /// Repeatable.
    #[arg(
        long = "pace-header",
        value_name = "REMAINING,RESET=seconds|unix|duration|rfc3339",
        value_parser = parse_pace_header,
        conflicts_with = "no_pace"
    )]
    pace_headers: Vec<PaceHeader>,
    /// Budget requests that arrive with `retry-budget-attempt` greater than
    /// 1 (retries of a proxy below) too. Without it they are forwarded once,
    /// so that retries do not multiply across proxies.
    #[arg(long)]
    retry_retries: bool,
    /// A write to this path (as sent upstream, e.g. `/v1/embeddings`) is
    /// safe to repeat: budgeted like a GET (repeatable). Without it, a
    /// write is sent once unless it has an Idempotency-Key; a preset never
    /// makes a write retryable.
    #[arg(long = "idempotent-path", value_name = "PATH", value_parser = parse_idempotent_path)]
    idempotent_paths: Vec<String>,
    /// On SIGTERM or SIGINT, how long actions in flight may still take
    /// before they are cancelled. Default: the budget.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg::parse)]
    drain: Option<Duration>,
    /// The format of the one log line per action on stderr.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Talk HTTP/2 to the upstream (h2c prior knowledge for http://, ALPN h2
    /// for https://), e.g. for gRPC.
    #[arg(long)]
    upstream_http2: bool,
    /// The longest the shared hold-off holds first attempts back, whatever
    /// a Retry-After asks (1 ms to 1 day).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = duration_arg::parse)]
    max_hold: Duration,
    /// A client connection (proxy or admin port) that has not sent a
    /// complete request head within this is closed: every HTTP/1 head
    /// (also the next one on a kept-alive connection), and for HTTP/2 the
    /// preface and first HEADERS. Unanswered HTTP/2 PINGs close the
    /// connection after this too.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_arg::parse)]
    header_timeout: Duration,
    /// A client connection (HTTP/1 keep-alive or HTTP/2) with no request
    /// in flight for this long is closed; HTTP/2 connections are also
    /// pinged at this interval.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg::parse)]
    idle_timeout: Duration,
    /// At most N client connections on the proxy port; past it a new
    /// connection is closed at once (keep it under the file-descriptor
    /// limit: each may also hold an upstream connection).
    #[arg(long, value_name = "N", default_value = "512")]
    max_connections: NonZeroUsize,
    /// At most N connections on the admin port, counted apart from the
    /// proxy's, so that /live and /ready answer however many callers the
    /// proxy port has.
    #[arg(long, value_name = "N", default_value = "32")]
    admin_max_connections: NonZeroUsize,
    /// Once a response's head is relayed, the longest the upstream may
    /// leave its body without a byte; then the caller's response is cut off
    /// and the log line says body=timed_out.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = duration_arg::parse)]
    body_idle_timeout: Duration,
    /// Worker threads serving the proxy port, each with its own listening
    /// socket on the `--listen` address (`SO_REUSEPORT`: the kernel spreads
    /// new connections over them) and its own upstream connections, so a
    /// request is served start to end on one thread. Default: the CPUs this
    /// process may use.
    #[arg(long, value_name = "N")]
    workers: Option<NonZeroUsize>,
    /// The budget, the signals and the CA, shared with `get` (last: its
    /// help heading applies to what follows it).
    #[command(flatten)]
    budget: BudgetArgs,
}

/// The format of the per-action log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `key=value` text.
    Text,
    /// One JSON object per line.
    Json,
}

/// The checked configuration.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The routes, in the order given (the flags make one).
    pub routes: Vec<RouteConfig>,
    /// The config file they were read from, read again on SIGHUP.
    pub file: Option<PathBuf>,
    /// The proxy's address.
    pub listen: SocketAddr,
    /// The admin address.
    pub admin: SocketAddr,
    /// The gate, over all routes.
    pub concurrency: Option<NonZeroUsize>,
    /// How long in-flight actions may take after a shutdown signal.
    pub drain: Duration,
    /// The log line format.
    pub log_format: LogFormat,
    /// What bounds every client connection, on both ports.
    pub connections: ConnectionLimits,
    /// The most connections on the proxy port.
    pub max_connections: NonZeroUsize,
    /// The most connections on the admin port.
    pub admin_max_connections: NonZeroUsize,
    /// The longest wait for the next byte of a relayed response body.
    pub body_idle_timeout: Duration,
    /// Worker threads on the proxy port.
    pub workers: NonZeroUsize,
}

impl ProxyConfig {
    /// What a reload cannot change (listeners, workers, limits, drain,
    /// log format): these stay as started.
    pub fn same_process(&self, other: &Self) -> bool {
        (
            self.listen,
            self.admin,
            self.concurrency,
            self.drain,
            self.log_format,
            self.connections,
            self.max_connections,
            self.admin_max_connections,
            self.body_idle_timeout,
            self.workers,
        ) == (
            other.listen,
            other.admin,
            other.concurrency,
            other.drain,
            other.log_format,
            other.connections,
            other.max_connections,
            other.admin_max_connections,
            other.body_idle_timeout,
            other.workers,
        )
    }
}

/// The flags a config file replaces (`--config` conflicts with each).
const ROUTE_FLAGS: [&str; 35] = [
    "upstream",
    "listen",
    "admin",
    "concurrency",
    "retry_ratio",
    "retry_reserve",
    "no_client_budget",
    "no_hold_off",
    "hold_off_redis",
    "hold_off_namespace",
    "no_pace",
    "pace_headers",
    "retry_retries",
    "idempotent_paths",
    "drain",
    "log_format",
    "upstream_http2",
    "max_hold",
    "header_timeout",
    "idle_timeout",
    "max_connections",
    "admin_max_connections",
    "body_idle_timeout",
    "workers",
    "budget",
    "max_attempts",
    "attempt_timeout",
    "min_wait",
    "untrusted_clock",
    "cacert",
    "preset",
    "ratelimit_fields",
    "reset_headers",
    "reset_max_interval",
    "spread",
];

/// The time bounds of a client connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// `--header-timeout`.
    pub header_timeout: Duration,
    /// `--idle-timeout`.
    pub idle_timeout: Duration,
}

/// The most `--workers`.
pub const MAX_WORKERS: usize = 1024;

impl Args {
    /// The config file to check, if `--check-config` was given.
    pub fn check_config(&self) -> Option<&Path> {
        self.check_config.as_deref()
    }

    /// The config file to serve, if `--config` was given (then the flags
    /// give nothing else).
    pub fn config_file(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// Checks the flags; the error is one line that names the flag.
    pub fn config(self) -> Result<ProxyConfig, String> {
        self.check()?;
        let route = RouteSpec {
            name: "default".to_owned(),
            matcher: Match::Any,
            upstream: self
                .upstream
                .ok_or("--upstream: required (or give --config)")?,
            http2: self.upstream_http2,
            retry_on: None,
            client_budget: (!self.no_client_budget)
                .then_some((self.retry_ratio, self.retry_reserve)),
            hold_off: !self.no_hold_off,
            hold_off_redis: self.hold_off_redis,
            hold_off_namespace: self.hold_off_namespace,
            pace: !self.no_pace,
            pace_headers: self.pace_headers,
            retry_retries: self.retry_retries,
            idempotent_paths: self.idempotent_paths,
            max_hold: self.max_hold,
            budget: self.budget,
        }
        .build()?;
        Ok(ProxyConfig {
            drain: self.drain.unwrap_or(route.policy.total_budget()),
            routes: vec![route],
            file: None,
            listen: self.listen,
            admin: self.admin,
            concurrency: self.concurrency,
            log_format: self.log_format,
            connections: ConnectionLimits {
                header_timeout: self.header_timeout,
                idle_timeout: self.idle_timeout,
            },
            max_connections: self.max_connections,
            admin_max_connections: self.admin_max_connections,
            body_idle_timeout: self.body_idle_timeout,
            workers: self.workers.unwrap_or_else(default_workers),
        })
    }

    /// The checks of the flags that make nothing themselves.
    fn check(&self) -> Result<(), String> {
        for (flag, value) in [
            ("--header-timeout", self.header_timeout),
            ("--idle-timeout", self.idle_timeout),
            ("--body-idle-timeout", self.body_idle_timeout),
        ] {
            if value.is_zero() {
                return Err(format!("{flag}: must be more than 0 (a zero bound would close every connection at once)"));
            }
        }
        if self.workers.is_some_and(|n| n.get() > MAX_WORKERS) {
            return Err(format!(
                "--workers: at most {MAX_WORKERS} (each is a thread with a socket of its own)"
            ));
        }
        if self.listen == self.admin && self.listen.port() != 0 {
            return Err(format!(
                "--admin: {} is also the --listen address; give them different ports",
                self.admin
            ));
        }
        Ok(())
    }
}

/// The default number of workers: the CPUs this process may use.
pub fn default_workers() -> NonZeroUsize {
    std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use http::uri::PathAndQuery;
    use http::HeaderName;
    use retry_budget::reset::ResetFormat;
    use retry_budget::Policy;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn config(list: &[&str]) -> Result<ProxyConfig, String> {
        Cli::try_parse_from(std::iter::once("proxy").chain(list.iter().copied()))
            .map_err(|e| e.to_string())
            .and_then(|c| c.args.config())
    }

    #[test]
    fn pace_headers_name_a_pair_and_its_format() {
        assert_eq!(
            parse_pace_header(" x-remaining , X-Reset = unix").unwrap(),
            PaceHeader {
                remaining: HeaderName::from_static("x-remaining"),
                reset: HeaderName::from_static("x-reset"),
                format: ResetFormat::Unix,
            }
        );
        for bad in [
            "x-remaining=unix",
            "x-remaining,x-reset",
            "a,b=weeks",
            "a b,c=unix",
            ",c=unix",
        ] {
            assert!(parse_pace_header(bad).is_err(), "{bad}");
        }
        let with = config(&[
            "--upstream",
            "http://127.0.0.1:9/",
            "--pace-header",
            "x-left,x-reset=seconds",
        ])
        .unwrap();
        assert!(with.routes[0].pacing.is_some());
        assert!(config(&[
            "--upstream",
            "http://127.0.0.1:9/",
            "--no-pace",
            "--pace-header",
            "x-left,x-reset=seconds",
        ])
        .is_err());
    }

    #[test]
    fn defaults_are_loopback_and_the_policy_defaults() {
        let config = config(&["--upstream", "http://127.0.0.1:9/"]).unwrap();
        assert_eq!(config.listen, "127.0.0.1:15001".parse().unwrap());
        assert_eq!(config.admin, "127.0.0.1:15002".parse().unwrap());
        assert!(config.listen.ip().is_loopback() && config.admin.ip().is_loopback());
        assert_eq!(config.routes[0].policy, Policy::default());
        assert_eq!(config.drain, Policy::default().total_budget());
        assert!(config.routes[0].client_budget.is_some() && config.routes[0].hold_off);
        assert!(config.routes[0].pacing.is_some(), "pacing is on by default");
        assert!(
            config.routes[0].reset.is_none(),
            "no reset header read unless asked"
        );
        assert!(!config.routes[0].retry_retries && config.concurrency.is_none());
        assert_eq!(config.log_format, LogFormat::Text);
        assert_eq!(config.routes[0].upstream.prefix, "");
        assert_eq!(
            config.routes[0].max_hold,
            tower_retry_budget::hold_off::DEFAULT_MAX_HOLD
        );
        assert_eq!(
            config.connections,
            ConnectionLimits {
                header_timeout: Duration::from_secs(30),
                idle_timeout: Duration::from_secs(60),
            }
        );
        assert_eq!(config.max_connections.get(), 512);
        assert_eq!(config.admin_max_connections.get(), 32);
        assert_eq!(config.body_idle_timeout, Duration::from_secs(60));
    }

    #[test]
    fn workers_default_to_the_cpus_and_are_bounded() {
        let default = config(&["--upstream", "http://a/"]).unwrap();
        assert_eq!(
            default.workers,
            std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
        );
        let three = config(&["--upstream", "http://a/", "--workers", "3"]).unwrap();
        assert_eq!(three.workers.get(), 3);
        for refused in ["0", "-1", "two", "1025"] {
            assert!(
                config(&["--upstream", "http://a/", "--workers", refused]).is_err(),
                "--workers {refused}"
            );
        }
        assert!(config(&["--upstream", "http://a/", "--workers", "1024"]).is_ok());
    }

    #[test]
    fn connection_bounds_are_checked() {
        let config = config(&[
            "--upstream",
            "http://a/",
            "--header-timeout",
            "1s",
            "--idle-timeout",
            "2s",
            "--max-connections",
            "3",
            "--admin-max-connections",
            "4",
            "--body-idle-timeout",
            "5s",
            "--max-hold",
            "1m",
        ])
        .unwrap();
        assert_eq!(config.connections.header_timeout, Duration::from_secs(1));
        assert_eq!(config.connections.idle_timeout, Duration::from_secs(2));
        assert_eq!(config.max_connections.get(), 3);
        assert_eq!(config.admin_max_connections.get(), 4);
        assert_eq!(config.body_idle_timeout, Duration::from_secs(5));
        assert_eq!(config.routes[0].max_hold, Duration::from_secs(60));
    }

    #[test]
    fn flags() {
        let config = config(&[
            "--upstream",
            "https://api.example.com:8443/v1/",
            "--listen",
            "0.0.0.0:8080",
            "--budget",
            "30s",
            "--max-attempts",
            "5",
            "--attempt-timeout",
            "2s",
            "--min-wait",
            "500ms",
            "--concurrency",
            "4",
            "--no-client-budget",
            "--no-hold-off",
            "--no-pace",
            "--retry-retries",
            "--drain",
            "5s",
            "--log-format",
            "json",
            "--untrusted-clock",
            "--reset-header",
            "x-ratelimit-reset=seconds",
            "--spread",
            "250ms",
        ])
        .unwrap();
        assert!(config.routes[0].reset.is_some());
        assert_eq!(config.routes[0].policy.spread(), Duration::from_millis(250));
        assert_eq!(config.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(
            config.routes[0].policy.total_budget(),
            Duration::from_secs(30)
        );
        assert_eq!(config.routes[0].policy.max_attempts(), 5);
        assert_eq!(
            config.routes[0].policy.attempt_cap(),
            Duration::from_secs(2)
        );
        assert_eq!(
            config.routes[0].policy.min_wait(),
            Duration::from_millis(500)
        );
        assert_eq!(config.concurrency, NonZeroUsize::new(4));
        assert!(
            config.routes[0].client_budget.is_none()
                && !config.routes[0].hold_off
                && config.routes[0].retry_retries
        );
        assert!(config.routes[0].pacing.is_none());
        assert_eq!(config.drain, Duration::from_secs(5));
        assert_eq!(config.log_format, LogFormat::Json);
        assert!(!config.routes[0].trusted_clock);
        assert!(config.routes[0].upstream.is_https());
        assert_eq!(config.routes[0].upstream.prefix, "/v1");
        let uri = config.routes[0]
            .upstream
            .uri_for(Some(&PathAndQuery::from_static("/items?a=1")))
            .unwrap();
        assert_eq!(uri, "https://api.example.com:8443/v1/items?a=1");
        for (given, sent) in [
            (
                "/../admin?x=/../y",
                "https://api.example.com:8443/v1/admin?x=/../y",
            ),
            ("/%2e%2e/admin", "https://api.example.com:8443/v1/admin"),
            ("/v1/../../admin", "https://api.example.com:8443/v1/admin"),
        ] {
            let uri = config.routes[0]
                .upstream
                .uri_for(Some(&PathAndQuery::from_maybe_shared(given).unwrap()))
                .unwrap();
            assert_eq!(uri, sent);
        }
    }

    #[test]
    fn without_a_prefix_a_plain_target_is_sent_as_received_and_dots_are_still_removed() {
        let config = config(&["--upstream", "http://up.test:8080"]).unwrap();
        assert_eq!(config.routes[0].upstream.prefix, "");
        for (given, sent) in [
            (
                "/items?a=1&b=/../c",
                "http://up.test:8080/items?a=1&b=/../c",
            ),
            ("/a//b/", "http://up.test:8080/a//b/"),
            ("/a%2Fb", "http://up.test:8080/a%2Fb"),
            ("/../admin", "http://up.test:8080/admin"),
            ("/a/%2e%2e/b?q", "http://up.test:8080/b?q"),
        ] {
            let uri = config.routes[0]
                .upstream
                .uri_for(Some(&PathAndQuery::from_maybe_shared(given).unwrap()))
                .unwrap();
            assert_eq!(uri, sent, "{given}");
        }
        assert_eq!(
            config.routes[0].upstream.uri_for(None).unwrap(),
            "http://up.test:8080/"
        );
        assert!(config.routes[0]
            .upstream
            .uri_for(Some(&PathAndQuery::from_static("/..%2fadmin")))
            .is_err());
    }

    #[test]
    fn bad_values_name_their_flag() {
        let err = |list: &[&str]| config(list).unwrap_err();
        assert!(err(&["--upstream", "ftp://a/"]).contains("http:// or https://"));
        assert!(err(&["--upstream", "http://u:p@a/"]).contains("credentials"));
        assert!(err(&["--upstream", "/path"]).contains("no scheme"));
        assert!(err(&["--upstream", "http://a/?q=1"]).contains("query"));
        assert!(err(&["--upstream", "http://a:99999/"]).contains("port"));
        assert!(err(&["--upstream", "http://a/", "--max-attempts", "0"])
            .starts_with("--max-attempts: "));
        assert!(
            err(&["--upstream", "http://a/", "--budget", "1s"]).starts_with("--attempt-timeout: ")
        );
        assert!(
            err(&["--upstream", "http://a/", "--retry-ratio", "0"]).starts_with("--retry-ratio: ")
        );
        assert!(err(&["--upstream", "http://a/", "--concurrency", "0"]).contains("concurrency"));
        assert!(err(&["--upstream", "http://a/", "--drain", "soon"]).contains("duration"));
        for flag in ["--header-timeout", "--idle-timeout", "--body-idle-timeout"] {
            assert!(err(&["--upstream", "http://a/", flag, "0s"]).starts_with(&format!("{flag}: ")));
        }
        assert!(err(&["--upstream", "http://a/", "--max-hold", "0s"]).starts_with("--max-hold: "));
        assert!(
            err(&["--upstream", "http://a/", "--max-hold", "2days"]).starts_with("--max-hold: ")
        );
        for flag in ["--max-connections", "--admin-max-connections"] {
            assert!(err(&["--upstream", "http://a/", flag, "0"]).contains(&flag[2..]));
        }
        assert!(err(&[
            "--upstream",
            "http://a/",
            "--listen",
            "127.0.0.1:9000",
            "--admin",
            "127.0.0.1:9000"
        ])
        .starts_with("--admin: "));
    }

    #[test]
    fn the_hold_off_shared_through_redis() {
        let shared = config(&[
            "--upstream",
            "http://a/",
            "--hold-off-redis",
            "redis://:secret@127.0.0.1:6379",
            "--hold-off-namespace",
            "tenant-1",
        ])
        .unwrap();
        assert!(shared.routes[0].hold_off);
        let store = shared.routes[0].hold_off_redis.clone().expect("a store");
        assert_eq!(
            store.to_string(),
            "redis://127.0.0.1:6379 (namespace tenant-1)",
            "never the password"
        );
        let alone = config(&["--upstream", "http://a/"]).unwrap();
        assert!(alone.routes[0].hold_off && alone.routes[0].hold_off_redis.is_none());

        let err = |list: &[&str]| config(list).unwrap_err();
        let base = ["--upstream", "http://a/"];
        let with = |extra: &[&'static str]| [&base[..], extra].concat();
        assert!(err(&with(&["--hold-off-redis", "http://a/"])).starts_with("--hold-off-redis: "));
        assert!(err(&with(&[
            "--hold-off-redis",
            "redis://h:1",
            "--hold-off-namespace",
            "the token: s3cret"
        ]))
        .starts_with("--hold-off-namespace: "));
        // A namespace needs a store; a store needs the hold-off on.
        assert!(err(&with(&["--hold-off-namespace", "t"])).contains("--hold-off-redis"));
        assert!(
            err(&with(&["--hold-off-redis", "redis://h:1", "--no-hold-off"]))
                .contains("cannot be used with")
        );
    }
}
