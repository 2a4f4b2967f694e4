//! The flags for the signals a rate-limited server sends besides
//! `Retry-After`: reset headers, the spread, and the presets for AI APIs
//! (`--preset NAME|auto|none`, each a [`Provider`] table). One clap `Args`
//! struct, flattened into every command that sends requests through the
//! layer (`get`, and the proxy), so that they all read the same flags the
//! same way.
//!
//! The rule is the core's: these flags only say which headers to read
//! ([`ResetSignal`]) and how wide the spread is
//! ([`PolicyBuilder::spread`](retry_budget::PolicyBuilder::spread)).

use std::time::Duration;

use http::HeaderName;
use retry_budget::{reset::ResetFormat, Policy};
use tower_retry_budget::{
    peek::PeekLayer,
    response_signal::{HttpSignal, Provider, ResetSignal},
    RetryBudgetLayer,
};

use crate::common::duration_arg;

/// An API whose signals a preset reads (what each reads is in the
/// `--preset` help and its [`Provider`] table; the variants carry no doc
/// comment so that clap lists them as `[possible values: openai, ...]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    // The tables of `tower_retry_budget::response_signal`, by name.
    Openai,
    Anthropic,
    Gemini,
    Azure,
    Groq,
    Mistral,
    Cohere,
    Openrouter,
    Bedrock,
    // Chosen from the upstream's host (`Provider::for_host`).
    Auto,
    // No preset (the proxy's default is `auto`).
    None,
}

impl Preset {
    /// The provider table, for a named preset (`auto` and `none`: none).
    pub fn provider(self) -> Option<&'static Provider> {
        use clap::ValueEnum as _;
        let value = self.to_possible_value()?;
        Provider::named(value.get_name())
    }

    /// The preset of a provider table.
    fn of(provider: &Provider) -> Option<Self> {
        use clap::ValueEnum as _;
        Self::from_str(provider.name, false).ok()
    }
}

/// `--preset NAME|auto|none`, `--ratelimit-fields`,
/// `--reset-header NAME=seconds|unix|duration|rfc3339`,
/// `--reset-max-interval DURATION`, `--spread DURATION`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SignalArgs {
    /// Read everything this API sends besides Retry-After: `openai`
    /// (retry-after-ms, x-should-retry, x-ratelimit-reset-requests and
    /// -tokens as Go durations, a 429 whose JSON body says
    /// insufficient_quota: not retried, category quota), `anthropic`
    /// (retry-after-ms, x-should-retry, anthropic-ratelimit-*-reset as RFC
    /// 3339 times), `gemini` (the body's RetryInfo retryDelay as the delay;
    /// a PerDay QuotaFailure: not retried, category quota), `azure`
    /// (retry-after, retry-after-ms, x-ms-retry-after-ms: the longest
    /// valid), `groq` (as openai), `mistral` (ratelimitbysize-reset
    /// seconds), `cohere` (retry-after-ms, Retry-After, X-RateLimit-Reset
    /// Unix time), `openrouter` (a 402 in_flight_budget_exhausted with a
    /// delay retried as a 429), `bedrock` (x-amzn-ErrorType
    /// ServiceQuotaExceededException: category quota); `auto`: chosen from
    /// the upstream's host (none for an unknown host; the proxy's
    /// default); `none`. A reset header counts only for a limit whose
    /// remaining is 0 (or not sent). Never makes a write retryable.
    #[arg(long, value_name = "API", value_enum)]
    pub preset: Option<Preset>,
    /// Read the IETF draft rate-limit fields when Retry-After is missing or
    /// shorter: `RateLimit` (`t=` or `reset=`) and `RateLimit-Reset` (delta
    /// seconds). Read on a retried status only; a reset header never
    /// shortens a valid Retry-After.
    #[arg(long)]
    pub ratelimit_fields: bool,
    /// Read another reset header, as delta `seconds`, a `unix` time, a
    /// Go-style `duration` (`1s`, `6m0s`) or an `rfc3339` time (e.g.
    /// `x-ratelimit-reset=unix`; a Unix or RFC 3339 time needs the trusted
    /// calendar clock). Repeatable.
    #[arg(long = "reset-header", value_name = "NAME=seconds|unix|duration|rfc3339", value_parser = parse_reset_header)]
    pub reset_headers: Vec<ResetHeaderArg>,
    /// Ignore (and record) a reset header asking for longer than this.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg::parse)]
    pub reset_max_interval: Option<Duration>,
    /// Add a random extra wait of up to DURATION on top of a server's delay
    /// (never shortening it): against servers that round their delay down,
    /// and clients told the same delay coming back in the same instant.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg::parse)]
    pub spread: Option<Duration>,
}

/// One `--reset-header NAME=FORMAT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetHeaderArg {
    /// The header (lower-case).
    pub name: HeaderName,
    /// How its value is read.
    pub format: ResetFormat,
}

impl SignalArgs {
    /// The policy with the flags' spread (unchanged without `--spread`).
    ///
    /// # Errors
    ///
    /// The policy's own validation, worded for the flag.
    pub fn apply_policy(&self, policy: Policy) -> Result<Policy, String> {
        let Some(spread) = self.spread else {
            return Ok(policy);
        };
        policy
            .to_builder()
            .spread(spread)
            .build()
            .map_err(|e| format!("--spread: {e}"))
    }

    /// The flags with `auto` (or, when `default_auto`, no `--preset`)
    /// resolved for the upstream `host`: the named preset of its provider,
    /// or `none` for an unknown host.
    #[must_use]
    pub fn for_host(mut self, host: &str, default_auto: bool) -> Self {
        let auto = match self.preset {
            Some(Preset::Auto) => true,
            None => default_auto,
            Some(_) => false,
        };
        if auto {
            self.preset = Some(
                Provider::for_host(host)
                    .and_then(Preset::of)
                    .unwrap_or(Preset::None),
            );
        }
        self
    }

    /// The provider table in force, if any (`auto` not yet resolved by
    /// [`for_host`](Self::for_host): none).
    pub fn provider(&self) -> Option<&'static Provider> {
        self.preset.and_then(Preset::provider)
    }

    /// The signal of the flags on top of the layer's own (reads nothing
    /// more than it without a reset flag).
    pub fn signal<G>(&self, inner: G) -> ResetSignal<G> {
        let mut signal = ResetSignal::wrapping(inner);
        if let Some(provider) = self.provider() {
            signal = signal.with_provider(provider);
        }
        if self.ratelimit_fields {
            signal = signal.ratelimit_fields();
        }
        for header in &self.reset_headers {
            signal = signal.header(header.name.clone(), header.format);
        }
        if let Some(max) = self.reset_max_interval {
            signal = signal.max_interval(max);
        }
        signal
    }

    /// The layer reading the flags' reset headers on top of plain HTTP
    /// (for gRPC: `layer.signal(args.signal(GrpcSignal))`). With a preset
    /// whose API sends its quota in the body, every attempt carries its
    /// deadline, for the [`quota`](Self::quota) layer below.
    pub fn apply(&self, layer: RetryBudgetLayer) -> RetryBudgetLayer {
        let layer = layer.signal(self.signal(HttpSignal));
        if self.quota().reads_any() {
            layer.attempt_deadlines()
        } else {
            layer
        }
    }

    /// Whether any flag asks for more than the layer's default reading.
    pub fn reads_any(&self) -> bool {
        self.provider().is_some()
            || self.ratelimit_fields
            || !self.reset_headers.is_empty()
            || self.reset_max_interval.is_some()
    }

    /// The layer below the retry layer that reads a retried status's JSON
    /// body: what the preset's provider says there (OpenAI's
    /// insufficient_quota, Gemini's RetryInfo and QuotaFailure,
    /// OpenRouter's retryable 402), nothing otherwise (then it passes
    /// every response on untouched).
    pub fn quota(&self) -> PeekLayer {
        match self.provider() {
            Some(provider) => PeekLayer::for_provider(provider),
            None => PeekLayer::new(),
        }
    }
}

/// One `--reset-header NAME=FORMAT` (also a config file's `reset_headers`).
pub fn parse_reset_header(text: &str) -> Result<ResetHeaderArg, String> {
    let (name, format) = text.split_once('=').ok_or_else(|| {
        format!("expected NAME=seconds, NAME=unix, NAME=duration or NAME=rfc3339, not {text:?}")
    })?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("{:?} is not a valid header name", name.trim()))?;
    let format = match format.trim() {
        "seconds" => ResetFormat::Seconds,
        "unix" => ResetFormat::Unix,
        "duration" => ResetFormat::Duration,
        "rfc3339" => ResetFormat::Rfc3339,
        other => {
            return Err(format!(
                "the format of {name} must be seconds, unix, duration or rfc3339, not {other:?}"
            ))
        }
    };
    Ok(ResetHeaderArg { name, format })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use http::{HeaderMap, StatusCode};
    use tower_retry_budget::response_signal::RetrySignal;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        signals: SignalArgs,
    }

    fn parse(list: &[&str]) -> Result<SignalArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("x").chain(list.iter().copied())).map(|c| c.signals)
    }

    #[test]
    fn no_flag_changes_nothing() {
        let args = parse(&[]).unwrap();
        assert_eq!(args.apply_policy(Policy::default()), Ok(Policy::default()));
        assert!(!args.signal(HttpSignal).reads_any());
    }

    #[test]
    fn every_flag() {
        let args = parse(&[
            "--ratelimit-fields",
            "--reset-header",
            "X-RateLimit-Reset=unix",
            "--reset-header",
            "retry-after-seconds=seconds",
            "--reset-max-interval",
            "5m",
            "--spread",
            "500ms",
        ])
        .unwrap();
        assert!(args.ratelimit_fields);
        assert_eq!(
            args.reset_headers,
            vec![
                ResetHeaderArg {
                    name: HeaderName::from_static("x-ratelimit-reset"),
                    format: ResetFormat::Unix
                },
                ResetHeaderArg {
                    name: HeaderName::from_static("retry-after-seconds"),
                    format: ResetFormat::Seconds
                },
            ]
        );
        assert_eq!(args.reset_max_interval, Some(Duration::from_secs(300)));
        let policy = args.apply_policy(Policy::default()).unwrap();
        assert_eq!(policy.spread(), Duration::from_millis(500));

        // The signal reads the named header on a 429.
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-reset", "1700000003".parse().unwrap());
        let read = args.signal(HttpSignal).read(
            StatusCode::TOO_MANY_REQUESTS,
            &headers,
            &http::Extensions::new(),
        );
        let found = read.reset_headers().expect("read");
        assert_eq!(found.max_interval(), Some(Duration::from_secs(300)));
        assert!(!found.is_empty());
    }

    #[test]
    fn every_preset_is_a_provider_table_and_auto_goes_by_host() {
        for name in [
            "openai",
            "anthropic",
            "gemini",
            "azure",
            "groq",
            "mistral",
            "cohere",
            "openrouter",
            "bedrock",
        ] {
            let args = parse(&["--preset", name]).unwrap();
            assert_eq!(args.provider().map(|p| p.name), Some(name));
            assert!(args.reads_any(), "{name}");
            // A named preset stays whatever the host.
            let kept = args.for_host("api.openai.com", true);
            assert_eq!(kept.provider().map(|p| p.name), Some(name));
        }
        let auto = parse(&["--preset", "auto"]).unwrap();
        assert_eq!(auto.provider(), None, "not resolved yet");
        let gemini = auto
            .clone()
            .for_host("generativelanguage.googleapis.com", false);
        assert_eq!(gemini.preset, Some(Preset::Gemini));
        assert!(gemini.quota().reads_any());
        let unknown = auto.for_host("example.com", false);
        assert_eq!(
            (unknown.preset, unknown.provider()),
            (Some(Preset::None), None)
        );
        assert!(!unknown.reads_any());
        // No flag: auto only where it is the default (the proxy).
        let plain = parse(&[]).unwrap();
        assert_eq!(plain.clone().for_host("api.groq.com", false).preset, None);
        assert_eq!(
            plain.for_host("api.groq.com", true).preset,
            Some(Preset::Groq)
        );
        let none = parse(&["--preset", "none"]).unwrap();
        assert_eq!(
            none.for_host("api.groq.com", true).preset,
            Some(Preset::None)
        );
    }

    #[test]
    fn bad_values_are_clear_errors() {
        for (list, expected) in [
            (
                &["--reset-header", "x-reset"][..],
                "expected NAME=seconds, NAME=unix, NAME=duration or NAME=rfc3339",
            ),
            (
                &["--reset-header", "x-reset=millis"][..],
                "must be seconds, unix, duration or rfc3339",
            ),
            (
                &["--reset-header", "bad name=unix"][..],
                "not a valid header name",
            ),
            (&["--spread", "soon"][..], "expected a duration"),
        ] {
            let err = parse(list).unwrap_err().to_string();
            assert!(err.contains(expected), "{list:?}: {err}");
        }
    }
}
