//! The budget flags, one clap `Args` struct flattened into every command
//! that sends requests through the layer (`get` and `proxy`), with the
//! signal flags ([`SignalArgs`]) inside it: both commands read the same
//! flags, with the same help text, and [`BudgetArgs::policy`] turns them
//! into the one [`Policy`] with one wording for every bad value.

use std::path::PathBuf;
use std::time::Duration;

use retry_budget::{Policy, PolicyError};

use crate::common::duration_arg;
use crate::common::signal_args::SignalArgs;

/// `--budget`, `--max-attempts`, `--attempt-timeout`, `--min-wait`,
/// `--untrusted-clock`, `--cacert` and the signal flags.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Budget and signals (shared by get and proxy)")]
pub struct BudgetArgs {
    /// The total budget of each action, counted from its first attempt's
    /// start (the proxy also shrinks it to a caller's grpc-timeout or
    /// x-envoy-upstream-rq-timeout-ms).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value = "20s", value_parser = duration_arg::parse)]
    pub budget: Duration,
    /// The maximum number of attempts per action, the first included.
    #[arg(
        long,
        value_name = "N",
        allow_hyphen_values = true,
        default_value_t = 3
    )]
    pub max_attempts: u32,
    /// The per-attempt cap: reserved in full before every attempt, and the
    /// attempt's deadline.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value = "4s", value_parser = duration_arg::parse)]
    pub attempt_timeout: Duration,
    /// The shortest wait applied to a valid Retry-After.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, default_value = "1s", value_parser = duration_arg::parse)]
    pub min_wait: Duration,
    /// Trust no calendar clock: a Retry-After date stops with clock_untrusted.
    #[arg(long)]
    pub untrusted_clock: bool,
    /// Trust only the CA certificates in this PEM file for https:// (instead
    /// of the platform's roots), e.g. a private CA.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Reset headers and spread.
    #[command(flatten)]
    pub signals: SignalArgs,
}

impl BudgetArgs {
    /// The policy the flags describe, the spread included.
    ///
    /// # Errors
    ///
    /// One line naming the flag at fault and the policy's own reason.
    pub fn policy(&self) -> Result<Policy, String> {
        let policy = Policy::builder()
            .total_budget(self.budget)
            .max_attempts(self.max_attempts)
            .attempt_cap(self.attempt_timeout)
            .min_wait(self.min_wait)
            .build()
            .map_err(|e| format!("{}: {e}", flag_of(&e)))?;
        self.signals.apply_policy(policy)
    }
}

/// The flag a policy error is about. The cap must fit in the budget: a cap
/// larger than the budget is reported against `--attempt-timeout`, the flag
/// that reserves it.
fn flag_of(error: &PolicyError) -> &'static str {
    match error {
        PolicyError::ZeroBudget => "--budget",
        PolicyError::ZeroAttempts | PolicyError::TooManyAttempts { .. } => "--max-attempts",
        PolicyError::ZeroAttemptCap | PolicyError::CapExceedsBudget { .. } => "--attempt-timeout",
        // Not reachable from these flags (statuses and the fallback are
        // not flags); named for what they are should one become one.
        PolicyError::NoRetryStatuses | PolicyError::StatusNotRetryable(_) => "the retried statuses",
        PolicyError::ZeroFallbackBase | PolicyError::ZeroFallbackCap => "the fallback",
        _ => "the budget flags",
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        budget: BudgetArgs,
    }

    fn policy(args: &[&str]) -> Result<Policy, String> {
        let cli = Cli::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.budget.policy()
    }

    #[test]
    fn defaults_are_the_policy_defaults() {
        assert_eq!(policy(&[]).unwrap(), Policy::default());
    }

    #[test]
    fn every_bad_value_names_its_flag() {
        for (args, flag) in [
            (&["--budget", "0s"][..], "--budget: "),
            (&["--max-attempts", "0"], "--max-attempts: "),
            (&["--max-attempts", "100000"], "--max-attempts: "),
            (&["--attempt-timeout", "0s"], "--attempt-timeout: "),
            (&["--attempt-timeout", "30s"], "--attempt-timeout: "),
        ] {
            let error = policy(args).unwrap_err();
            assert!(error.starts_with(flag), "{args:?}: {error}");
        }
    }

    #[test]
    fn a_negative_value_is_a_value_error_not_an_unknown_flag() {
        for args in [&["--budget", "-1s"][..], &["--max-attempts", "-1"]] {
            let error = policy(args).unwrap_err();
            assert!(error.contains("invalid value"), "{args:?}: {error}");
        }
    }
}
