//! The config file (`--config FILE`, `--check-config FILE`): TOML read
//! through `serde` and `toml` into typed tables, unknown keys refused,
//! every value checked as its flag is (durations as humantime reads them),
//! then made into the same [`ProxyConfig`] the flags make:
//!
//! ```toml
//! listen = "127.0.0.1:15001"      # also: admin, workers, concurrency,
//! admin = "127.0.0.1:15002"       # drain, log_format ("text" | "json")
//!
//! [limits]                        # header_timeout, idle_timeout,
//! max_connections = 512           # body_idle_timeout, admin_max_connections
//!
//! [[route]]
//! name = "openai"                 # the `route` label: [A-Za-z0-9_-]
//! match.prefix = "/openai"        # or match.host = "api.openai.com"
//! upstream = "https://api.openai.com/v1"
//! attempts = 3                    # --max-attempts
//! per_try_timeout = "20s"         # --attempt-timeout
//! budget = "60s"
//! retry_on = [429, 503]           # the statuses retried
//! reset_headers = ["x-reset=seconds"]
//! max_interval = "5m"             # --reset-max-interval
//! ```
//!
//! A route's other keys are its flags' names (`min_wait`, `spread`,
//! `preset`, `ratelimit_fields`, `idempotent_paths`, `retry_retries`,
//! `hold_off`, `hold_off_redis`, `hold_off_namespace`, `max_hold`, `pace`,
//! `pace_headers`, `client_budget`, `retry_ratio`, `retry_reserve`,
//! `untrusted_clock`, `cacert`, `http2`). Every error names the file, the
//! line and column, the key, and what was expected: toml's spans locate
//! what it refuses; a route refused as a whole is located at its key.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use retry_budget::Policy;
use serde::Deserialize;
use toml::Spanned;

use super::args::{default_workers, ConnectionLimits, LogFormat, ProxyConfig, MAX_WORKERS};
use super::path::normalize;
use super::route::{
    file_key, parse_idempotent_path, parse_pace_header, Match, PaceHeader, RouteConfig, RouteSpec,
};
use super::upstream::Upstream;
use crate::common::budget_args::BudgetArgs;
use crate::common::duration_arg;
use crate::common::exit::Exit;
use crate::common::signal_args::{parse_reset_header, Preset, ResetHeaderArg, SignalArgs};

/// A value read from a string by one of the flags' parsers (its error
/// becomes toml's, located at the value).
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "String", bound = "T: Parse")]
struct Word<T: Parse>(T);

/// The parser of a [`Word`].
trait Parse: Sized {
    fn parse(text: &str) -> Result<Self, String>;
}

impl<T: Parse> TryFrom<String> for Word<T> {
    type Error = String;
    fn try_from(text: String) -> Result<Self, String> {
        T::parse(&text).map(Word)
    }
}

impl Parse for Duration {
    fn parse(text: &str) -> Result<Self, String> {
        duration_arg::parse(text)
    }
}

impl Parse for Upstream {
    fn parse(text: &str) -> Result<Self, String> {
        Upstream::parse(text)
    }
}

impl Parse for ResetHeaderArg {
    fn parse(text: &str) -> Result<Self, String> {
        parse_reset_header(text)
    }
}

impl Parse for PaceHeader {
    fn parse(text: &str) -> Result<Self, String> {
        parse_pace_header(text)
    }
}

/// An idempotent path.
#[derive(Debug, Clone)]
struct IdempotentPath(String);

impl Parse for IdempotentPath {
    fn parse(text: &str) -> Result<Self, String> {
        parse_idempotent_path(text).map(IdempotentPath)
    }
}

impl Parse for Preset {
    fn parse(text: &str) -> Result<Self, String> {
        value_enum(text)
    }
}

impl Parse for LogFormat {
    fn parse(text: &str) -> Result<Self, String> {
        value_enum(text)
    }
}

/// A clap value enum's value, its possible values listed if not one.
fn value_enum<T: clap::ValueEnum>(text: &str) -> Result<T, String> {
    T::from_str(text, false).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_owned()))
            .collect();
        format!("expected one of {}, not {text:?}", names.join(", "))
    })
}

/// The file's top level.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    admin: Option<SocketAddr>,
    workers: Option<NonZeroUsize>,
    concurrency: Option<NonZeroUsize>,
    drain: Option<Word<Duration>>,
    log_format: Option<Word<LogFormat>>,
    #[serde(default)]
    limits: Limits,
    #[serde(rename = "route", default)]
    routes: Vec<Spanned<FileRoute>>,
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Limits {
    header_timeout: Option<Word<Duration>>,
    idle_timeout: Option<Word<Duration>>,
    body_idle_timeout: Option<Word<Duration>>,
    max_connections: Option<NonZeroUsize>,
    admin_max_connections: Option<NonZeroUsize>,
}

/// A `[[route]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRoute {
    name: String,
    #[serde(rename = "match")]
    matcher: FileMatch,
    upstream: Word<Upstream>,
    #[serde(default)]
    http2: bool,
    budget: Option<Word<Duration>>,
    attempts: Option<u32>,
    per_try_timeout: Option<Word<Duration>>,
    min_wait: Option<Word<Duration>>,
    spread: Option<Word<Duration>>,
    retry_on: Option<Vec<u16>>,
    preset: Option<Word<Preset>>,
    #[serde(default)]
    ratelimit_fields: bool,
    #[serde(default)]
    reset_headers: Vec<Word<ResetHeaderArg>>,
    max_interval: Option<Word<Duration>>,
    #[serde(default)]
    idempotent_paths: Vec<Word<IdempotentPath>>,
    #[serde(default)]
    retry_retries: bool,
    #[serde(default = "yes")]
    hold_off: bool,
    hold_off_redis: Option<String>,
    hold_off_namespace: Option<String>,
    max_hold: Option<Word<Duration>>,
    #[serde(default = "yes")]
    pace: bool,
    #[serde(default)]
    pace_headers: Vec<Word<PaceHeader>>,
    #[serde(default = "yes")]
    client_budget: bool,
    retry_ratio: Option<u32>,
    retry_reserve: Option<u32>,
    #[serde(default)]
    untrusted_clock: bool,
    cacert: Option<PathBuf>,
}

/// A route's `match`: one of `prefix` and `host`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMatch {
    prefix: Option<String>,
    host: Option<String>,
}

const fn yes() -> bool {
    true
}

/// Reads and checks the config file at `path`.
///
/// # Errors
///
/// One line: the file, line and column, key, and what was expected.
pub fn load(path: &Path) -> Result<ProxyConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let mut config = parse(&text, &path.display().to_string())?;
    config.file = Some(path.to_owned());
    Ok(config)
}

/// `--check-config`: checks the file and prints the routes it would
/// serve; 0 if it is valid, 2 if not.
pub fn check(path: &Path) -> ExitCode {
    match load(path) {
        Ok(config) => {
            println!(
                "retry-budget proxy: {}: ok: {} route(s)",
                path.display(),
                config.routes.len()
            );
            for route in &config.routes {
                println!("  {}", route.line());
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("retry-budget proxy: {message}");
            Exit::Usage.into()
        }
    }
}

/// Reads and checks the text of the file named `name`.
///
/// # Errors
///
/// As [`load`].
pub fn parse(text: &str, name: &str) -> Result<ProxyConfig, String> {
    let file: FileConfig = toml::from_str(text).map_err(|e| {
        let at = e.span().unwrap_or(0..0);
        located(text, name, at.start, key_at(text, at.start), e.message())
    })?;
    let top = |key: &str, message: String| {
        let at = key_position(text, 0..text.len(), key);
        located(text, name, at, Some(key), &message)
    };
    if file.routes.is_empty() {
        return Err(top("route", "expected at least one [[route]]".into()));
    }
    let mut routes = Vec::with_capacity(file.routes.len());
    for route in file.routes {
        let span = route.span();
        let made = route
            .into_inner()
            .build(&routes)
            .map_err(|(key, message)| {
                let (key, at) = route_key(text, span.clone(), key);
                located(text, name, at, Some(key), &message)
            })?;
        routes.push(made);
    }
    process(file.listen, file.admin, file.workers, &file.limits)
        .map_err(|(key, message)| top(key, message))?;
    let budgets = routes.iter().map(|r| r.policy.total_budget());
    let limits = &file.limits;
    let default =
        |d: &Option<Word<Duration>>, secs| d.as_ref().map_or(Duration::from_secs(secs), |d| d.0);
    Ok(ProxyConfig {
        drain: file
            .drain
            .map_or_else(|| budgets.max().unwrap_or_default(), |d| d.0),
        routes,
        file: None,
        listen: file.listen.unwrap_or(DEFAULT_LISTEN),
        admin: file.admin.unwrap_or(DEFAULT_ADMIN),
        concurrency: file.concurrency,
        log_format: file.log_format.map_or(LogFormat::Text, |f| f.0),
        connections: ConnectionLimits {
            header_timeout: default(&limits.header_timeout, 30),
            idle_timeout: default(&limits.idle_timeout, 60),
        },
        max_connections: limits.max_connections.unwrap_or(nonzero(512)),
        admin_max_connections: limits.admin_max_connections.unwrap_or(nonzero(32)),
        body_idle_timeout: default(&limits.body_idle_timeout, 60),
        workers: file.workers.unwrap_or_else(default_workers),
    })
}

const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    15001,
));
const DEFAULT_ADMIN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    15002,
));

fn nonzero(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

/// The checks of the process's keys (as the flags' own).
fn process(
    listen: Option<SocketAddr>,
    admin: Option<SocketAddr>,
    workers: Option<NonZeroUsize>,
    limits: &Limits,
) -> Result<(), (&'static str, String)> {
    for (key, value) in [
        ("header_timeout", &limits.header_timeout),
        ("idle_timeout", &limits.idle_timeout),
        ("body_idle_timeout", &limits.body_idle_timeout),
    ] {
        if value.as_ref().is_some_and(|v| v.0.is_zero()) {
            return Err((
                key,
                "expected more than 0 (a zero bound would close every connection at once)".into(),
            ));
        }
    }
    if workers.is_some_and(|n| n.get() > MAX_WORKERS) {
        return Err(("workers", format!("expected at most {MAX_WORKERS}")));
    }
    let (listen, admin) = (
        listen.unwrap_or(DEFAULT_LISTEN),
        admin.unwrap_or(DEFAULT_ADMIN),
    );
    if listen == admin && listen.port() != 0 {
        return Err((
            "admin",
            format!("{admin} is also the listen address; expected another port"),
        ));
    }
    Ok(())
}

impl FileRoute {
    /// The checked route (`before`: the routes already read, whose names
    /// and matches it must not repeat); the error names its key.
    fn build(self, before: &[RouteConfig]) -> Result<RouteConfig, (&'static str, String)> {
        check_name(&self.name).map_err(|e| ("name", e))?;
        if before.iter().any(|r| r.name == self.name) {
            return Err((
                "name",
                format!(
                    "expected a name no other route has, not {:?} again",
                    self.name
                ),
            ));
        }
        let matcher = self.matcher.check()?;
        if before.iter().any(|r| r.matcher == matcher) {
            return Err(("match", format!("{matcher} is already another route's")));
        }
        let name = self.name.clone();
        self.spec(matcher).build().map_err(|message| {
            let (flag, reason) = message.split_once(": ").unwrap_or(("upstream", &message));
            let key = ROUTE_KEYS
                .iter()
                .copied()
                .find(|k| *k == file_key(flag))
                .unwrap_or("upstream");
            (key, format!("route {name:?}: {reason}"))
        })
    }

    /// The route as the flags would give it.
    fn spec(self, matcher: Match) -> RouteSpec {
        let defaults = Policy::default();
        let duration = |d: Option<Word<Duration>>, default| d.map_or(default, |d| d.0);
        RouteSpec {
            name: self.name,
            matcher,
            upstream: self.upstream.0,
            http2: self.http2,
            budget: BudgetArgs {
                budget: duration(self.budget, defaults.total_budget()),
                max_attempts: self.attempts.unwrap_or(defaults.max_attempts()),
                attempt_timeout: duration(self.per_try_timeout, defaults.attempt_cap()),
                min_wait: duration(self.min_wait, defaults.min_wait()),
                untrusted_clock: self.untrusted_clock,
                cacert: self.cacert,
                signals: SignalArgs {
                    preset: self.preset.map(|p| p.0),
                    ratelimit_fields: self.ratelimit_fields,
                    reset_headers: self.reset_headers.into_iter().map(|h| h.0).collect(),
                    reset_max_interval: self.max_interval.map(|d| d.0),
                    spread: self.spread.map(|d| d.0),
                },
            },
            retry_on: self.retry_on,
            client_budget: self.client_budget.then_some((
                self.retry_ratio.unwrap_or(20),
                self.retry_reserve.unwrap_or(10),
            )),
            hold_off: self.hold_off,
            hold_off_redis: self.hold_off_redis,
            hold_off_namespace: self.hold_off_namespace,
            pace: self.pace,
            pace_headers: self.pace_headers.into_iter().map(|p| p.0).collect(),
            retry_retries: self.retry_retries,
            idempotent_paths: self.idempotent_paths.into_iter().map(|p| p.0 .0).collect(),
            max_hold: duration(
                self.max_hold,
                tower_retry_budget::hold_off::DEFAULT_MAX_HOLD,
            ),
        }
    }
}

/// The keys a route's build error may name.
const ROUTE_KEYS: [&str; 12] = [
    "budget",
    "attempts",
    "per_try_timeout",
    "min_wait",
    "spread",
    "retry_on",
    "max_interval",
    "retry_ratio",
    "hold_off_redis",
    "hold_off_namespace",
    "max_hold",
    "upstream",
];

impl FileMatch {
    /// One of `prefix` (an absolute path, no query, no dot-segments; its
    /// trailing `/` dropped, `/` alone taking every request) and `host`.
    fn check(&self) -> Result<Match, (&'static str, String)> {
        match (&self.prefix, &self.host) {
            (Some(prefix), None) => {
                let bad = !prefix.starts_with('/')
                    || prefix.contains(['?', '#', '%', '\\'])
                    || prefix.contains(char::is_whitespace)
                    || normalize(prefix).map_or(true, |n| n != prefix.as_str());
                if bad {
                    return Err(("prefix", format!("expected an absolute path such as /openai (no query, no dot-segments, no %-escapes), not {prefix:?}")));
                }
                let prefix = prefix.trim_end_matches('/');
                Ok(if prefix.is_empty() {
                    Match::Any
                } else {
                    Match::Prefix(prefix.to_owned())
                })
            }
            (None, Some(host)) => {
                let ok = http::uri::Authority::try_from(host.as_str())
                    .is_ok_and(|a| !a.as_str().contains('@') && !a.host().is_empty());
                if !ok {
                    return Err(("host", format!("expected a host such as api.openai.com (a port optional), not {host:?}")));
                }
                Ok(Match::Host(host.to_ascii_lowercase()))
            }
            _ => Err((
                "match",
                "expected one of match.prefix and match.host".into(),
            )),
        }
    }
}

/// A route's name: a bounded metric label.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected 1 to 64 of A-Z, a-z, 0-9, - and _, not {name:?}"
        ))
    }
}

/// `name:line:column: key: message` for byte `at` of `text`.
fn located(text: &str, name: &str, at: usize, key: Option<&str>, message: &str) -> String {
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |n| n + 1) + 1;
    let message = message.trim_end();
    match key {
        Some(key) => format!("{name}:{line}:{column}: {key}: {message}"),
        None => format!("{name}:{line}:{column}: {message}"),
    }
}

/// The key of the line holding byte `at` (`match.prefix = 1`: `match.prefix`;
/// `[[route]]`: `route`), if it names one.
fn key_at(text: &str, at: usize) -> Option<&str> {
    let start = text.get(..at)?.rfind('\n').map_or(0, |n| n + 1);
    let line = text[start..].lines().next()?.trim();
    if let Some(table) = line.strip_prefix('[') {
        return Some(table.trim_matches(['[', ']', ' ']));
    }
    let (key, _) = line.split_once('=')?;
    Some(key.trim())
}

/// The key a route's error is located at: `key` where the route sets
/// it; a cap larger than the budget (about both) at the one of the two
/// the route sets; else the route's start.
fn route_key(text: &str, span: Range<usize>, key: &'static str) -> (&'static str, usize) {
    let partner = match key {
        "per_try_timeout" => "budget",
        "budget" => "per_try_timeout",
        other => other,
    };
    [key, partner]
        .into_iter()
        .find_map(|key| Some((key, find_key(text, span.clone(), key)?)))
        .unwrap_or((key, span.start))
}

/// Where `key` is set within `span` of `text` (its line's start), else
/// where `span` starts.
fn key_position(text: &str, span: Range<usize>, key: &str) -> usize {
    find_key(text, span.clone(), key).unwrap_or(span.start)
}

/// Where `key` is set within `span` of `text` (its line's start), if it is.
fn find_key(text: &str, span: Range<usize>, key: &str) -> Option<usize> {
    let within = text.get(span.clone()).unwrap_or("");
    let mut offset = span.start;
    for line in within.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let names = trimmed.split('=').next().unwrap_or("").trim();
        if names == key
            || names.ends_with(&format!(".{key}"))
            || trimmed.starts_with(&format!("[[{key}]]"))
        {
            return Some(offset + (line.len() - trimmed.len()));
        }
        offset += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROUTE: &str =
        "[[route]]\nname = \"a\"\nmatch.prefix = \"/a\"\nupstream = \"http://a.test\"\n";

    fn error(text: &str) -> String {
        parse(text, "f.toml").unwrap_err()
    }

    #[test]
    fn a_minimal_file_takes_the_flags_defaults() {
        let config = parse(ROUTE, "f.toml").unwrap();
        assert_eq!(config.listen, DEFAULT_LISTEN);
        assert_eq!(config.admin, DEFAULT_ADMIN);
        assert_eq!(config.log_format, LogFormat::Text);
        assert_eq!(config.max_connections.get(), 512);
        assert_eq!(config.connections.header_timeout, Duration::from_secs(30));
        let route = &config.routes[0];
        assert_eq!(route.policy, Policy::default());
        assert_eq!(route.matcher, Match::Prefix("/a".into()));
        assert!(route.hold_off && route.pacing.is_some() && route.client_budget.is_some());
        assert_eq!(config.drain, Policy::default().total_budget());
    }

    #[test]
    fn top_level_keys_and_limits_are_read() {
        let text = format!(
            "listen = \"0.0.0.0:8000\"\nadmin = \"127.0.0.1:8001\"\nworkers = 3\nconcurrency = 7\n\
             drain = \"5s\"\nlog_format = \"json\"\n[limits]\nheader_timeout = \"1s\"\n\
             idle_timeout = \"2s\"\nbody_idle_timeout = \"3s\"\nmax_connections = 9\n\
             admin_max_connections = 4\n{ROUTE}"
        );
        let config = parse(&text, "f.toml").unwrap();
        assert_eq!(config.listen, "0.0.0.0:8000".parse().unwrap());
        assert_eq!(config.workers.get(), 3);
        assert_eq!(config.concurrency.map(NonZeroUsize::get), Some(7));
        assert_eq!(config.drain, Duration::from_secs(5));
        assert_eq!(config.log_format, LogFormat::Json);
        assert_eq!(config.connections.idle_timeout, Duration::from_secs(2));
        assert_eq!(config.body_idle_timeout, Duration::from_secs(3));
        assert_eq!(config.admin_max_connections.get(), 4);
    }

    #[test]
    fn every_error_names_the_file_line_and_key() {
        for (text, expected) in [
            (
                "[limits]\nidle = \"1s\"\n",
                "f.toml:2:1: idle: unknown field `idle`",
            ),
            (
                "log_format = \"xml\"\n",
                "f.toml:1:14: log_format: expected one of text, json",
            ),
            (
                "[limits]\nidle_timeout = \"0s\"\n",
                "f.toml:2:1: idle_timeout: expected more than 0",
            ),
            ("workers = 0\n", "f.toml:1:11: workers: "),
            (
                "listen = \"127.0.0.1:9\"\nadmin = \"127.0.0.1:9\"\n",
                "f.toml:2:1: admin: ",
            ),
        ] {
            let text = format!("{text}{ROUTE}");
            let error = error(&text);
            assert!(error.starts_with(expected), "{text}: {error}");
        }
    }

    #[test]
    fn routes_are_checked_one_by_one() {
        let route = |lines: &str| format!("[[route]]\n{lines}\n");
        for (text, expected) in [
            (route("name = \"a b\"\nmatch.prefix = \"/a\"\nupstream = \"http://a\""), "f.toml:2:1: name: expected 1 to 64"),
            (route("name = \"a\"\nmatch.prefix = \"a\"\nupstream = \"http://a\""), "f.toml:3:1: prefix: expected an absolute path"),
            (route("name = \"a\"\nmatch.prefix = \"/a/../b\"\nupstream = \"http://a\""), "f.toml:3:1: prefix: "),
            (route("name = \"a\"\nmatch.host = \"u@a\"\nupstream = \"http://a\""), "f.toml:3:1: host: expected a host"),
            (route("name = \"a\"\nmatch.prefix = \"/a\"\nupstream = \"http://a\"\nretry_on = [200]"), "f.toml:5:1: retry_on: route \"a\": "),
            (route("name = \"a\"\nmatch.prefix = \"/a\"\nupstream = \"http://a\"\nattempts = 0"), "f.toml:5:1: attempts: route \"a\": "),
            (route("name = \"a\"\nmatch.prefix = \"/a\"\nupstream = \"http://a\"\npreset = \"acme\""), "f.toml:5:10: preset: expected one of openai, "),
            (route("name = \"a\"\nupstream = \"http://a\""), "f.toml:1:1: route: missing field `match`"),
            (format!("{ROUTE}{ROUTE}"), "f.toml:6:1: name: expected a name no other route has"),
            (format!("{ROUTE}{}", route("name = \"b\"\nmatch.prefix = \"/a/\"\nupstream = \"http://b\"")), "f.toml:5:1: match: prefix /a/ is already another route's"),
        ] {
            let error = error(&text);
            assert!(error.starts_with(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_prefix_of_slash_takes_every_request() {
        let text = "[[route]]\nname = \"all\"\nmatch.prefix = \"/\"\nupstream = \"http://a\"\n";
        assert_eq!(parse(text, "f.toml").unwrap().routes[0].matcher, Match::Any);
    }
}
