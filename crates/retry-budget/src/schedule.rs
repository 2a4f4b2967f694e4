//! The arithmetic model: given schedules run through the same [`Action`].
//!
//! A fixture document (see `tests/fixtures/B62-16-schedules.json`, whose
//! `format` field explains every key) scripts, for each case, how long each
//! attempt takes, what it answers, when the calendar clock jumps, how late
//! each timer fires and when the user leaves. The replay only feeds those
//! facts to [`Action`] in time order; every decision is the state machine's.
//!
//! Arithmetic cannot enforce a timeout, so an attempt that lasted longer than
//! the per-attempt cap makes the case [`Outcome::InvalidData`] instead of
//! pretending the deadline fired.
//!
//! ```
//! use retry_budget::schedule;
//!
//! let doc = r#"{
//!   "calendar_epoch": "Mon, 01 Jan 2024 12:00:00 GMT",
//!   "policy": {"total_budget_s": 20, "max_attempts": 3, "attempt_cap_s": 4,
//!              "min_wait_s": 1, "fallback_base_s": 2, "retry_statuses": [429]},
//!   "cases": [{"id": "one", "attempts": [
//!       {"duration_s": 2, "status": 429, "retry_after": "30"}]}]
//! }"#;
//! let fixture = schedule::parse(doc)?;
//! let result = schedule::run_case(&fixture.cases[0]);
//! assert_eq!(result.to_json()["outcome"], "budget_exhausted");
//! assert_eq!(result.to_json()["stopped_at_s"], 2.0);
//! # Ok::<(), schedule::FixtureError>(())
//! ```

use std::fmt;
use std::time::{Duration, SystemTime};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::policy::Secs;
use crate::{retry_after::RetryAfter, Action, Decision, Outcome, Policy, Report};

/// A parsed fixture document.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// The document's policy.
    pub policy: Policy,
    /// The calendar time at elapsed 0.
    pub calendar_epoch: SystemTime,
    /// The cases, in order.
    pub cases: Vec<Case>,
}

/// One scripted case, with its own policy and epoch already resolved.
#[derive(Debug, Clone)]
pub struct Case {
    /// The case id.
    pub id: String,
    /// A human title, if given.
    pub title: Option<String>,
    /// The policy (the document's, with the case's overrides).
    pub policy: Policy,
    /// The calendar time at elapsed 0.
    pub calendar_epoch: SystemTime,
    /// The scripted attempts, in order.
    pub attempts: Vec<ScriptedAttempt>,
    /// Whether a trusted calendar clock is available.
    pub clock_trusted: bool,
    /// When the user leaves, if ever.
    pub leave_at: Option<Duration>,
    /// How late each timer fires, one per wait in order (missing: on time).
    pub wake_late_by: Vec<Duration>,
    /// Adjustments of the calendar clock (elapsed time is unaffected).
    pub calendar_jumps: Vec<CalendarJump>,
    /// The case's `expect` object, untouched, for [`mismatches`]. The replay
    /// never reads it.
    pub expect: Option<Value>,
}

/// One scripted attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedAttempt {
    /// From start to response.
    pub duration: Duration,
    /// The response status.
    pub status: u16,
    /// The raw `Retry-After` value, if present.
    pub retry_after: Option<String>,
}

/// At elapsed `at`, the calendar clock is moved by `by_nanos` nanoseconds
/// (negative: set back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalendarJump {
    /// When.
    pub at: Duration,
    /// By how much, signed.
    pub by_nanos: i128,
}

impl Case {
    /// The calendar reading at elapsed `now`, or `None` when the case has no
    /// trusted clock (or the reading falls outside what `SystemTime` holds).
    pub fn calendar_at(&self, now: Duration) -> Option<SystemTime> {
        if !self.clock_trusted {
            return None;
        }
        let jumped: i128 = self
            .calendar_jumps
            .iter()
            .filter(|j| j.at <= now)
            .map(|j| j.by_nanos)
            .sum();
        let offset = i128::try_from(now.as_nanos()).ok()? + jumped;
        let magnitude = Duration::from_nanos(u64::try_from(offset.unsigned_abs()).ok()?);
        if offset >= 0 {
            self.calendar_epoch.checked_add(magnitude)
        } else {
            self.calendar_epoch.checked_sub(magnitude)
        }
    }
}

/// A case that the model cannot replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidData {
    /// What is wrong, naming the attempt.
    pub message: String,
}

/// The result of one case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The case id.
    pub id: String,
    /// The report, or why the data could not be replayed.
    pub result: Result<Report, InvalidData>,
}

impl CaseResult {
    /// The outcome (`invalid_data` for data that cannot be replayed).
    pub fn outcome(&self) -> Outcome {
        self.result
            .as_ref()
            .map_or(Outcome::InvalidData, |r| r.outcome)
    }

    /// The JSON object of `retry-budget replay`, with exactly the keys `id`,
    /// `outcome`, `stopped_at_s`, `attempts_started`, `last_status`,
    /// `request_s`, `wait_s`, `starts_s`, `waits_s`, `events` and `message`.
    pub fn to_json(&self) -> Value {
        let mut line = Map::new();
        line.insert("id".into(), self.id.clone().into());
        line.insert("outcome".into(), self.outcome().as_str().into());
        match &self.result {
            Ok(report) => {
                let mut full = report.to_json();
                let mut take =
                    |key: &str| full.get_mut(key).map(Value::take).unwrap_or(Value::Null);
                let stopped_at = take("elapsed_s");
                line.insert("stopped_at_s".into(), stopped_at);
                for key in [
                    "attempts_started",
                    "last_status",
                    "request_s",
                    "wait_s",
                    "starts_s",
                    "waits_s",
                    "events",
                    "message",
                ] {
                    line.insert(key.into(), take(key));
                }
            }
            Err(invalid) => {
                line.insert("stopped_at_s".into(), Value::Null);
                line.insert("attempts_started".into(), 0.into());
                line.insert("last_status".into(), Value::Null);
                line.insert("request_s".into(), 0.0.into());
                line.insert("wait_s".into(), 0.0.into());
                line.insert("starts_s".into(), Value::Array(vec![]));
                line.insert("waits_s".into(), Value::Array(vec![]));
                line.insert("events".into(), Value::Array(vec![]));
                line.insert(
                    "message".into(),
                    format!(
                        "Stopped: the given data cannot be replayed.\n{}",
                        invalid.message
                    )
                    .into(),
                );
            }
        }
        Value::Object(line)
    }
}

/// Replays one case through a fresh [`Action`].
pub fn run_case(case: &Case) -> CaseResult {
    let result = replay(case);
    CaseResult {
        id: case.id.clone(),
        result,
    }
}

/// Replays every case of a fixture, in order.
pub fn run(fixture: &Fixture) -> Vec<CaseResult> {
    fixture.cases.iter().map(run_case).collect()
}

fn replay(case: &Case) -> Result<Report, InvalidData> {
    let cap = case.policy.attempt_cap();
    if let Some((index, attempt)) = case
        .attempts
        .iter()
        .enumerate()
        .find(|(_, a)| a.duration > cap)
    {
        return Err(InvalidData {
            message: format!(
                "Attempt {} lasted {}, longer than the {} per-attempt cap: the arithmetic model cannot enforce a timeout.",
                index + 1,
                Secs(attempt.duration),
                Secs(cap)
            ),
        });
    }

    let mut action = Action::new(case.policy);
    let mut now = Duration::ZERO;
    let mut waits_seen = 0usize;
    // The user leaves within the interval ending at `until`, if at all.
    let leaves_by = |until: Duration| case.leave_at.filter(|at| *at <= until);
    loop {
        match action.decision() {
            Decision::StartNow => match leaves_by(now) {
                Some(at) => action.caller_left(at),
                None => action.attempt_started(now),
            },
            Decision::AwaitResponse { attempt, .. } => {
                let Some(scripted) = case.attempts.get(attempt as usize - 1) else {
                    return Err(InvalidData {
                        message: format!(
                            "Attempt {attempt} is needed, but the case scripts only {}.",
                            case.attempts.len()
                        ),
                    });
                };
                let end = now.saturating_add(scripted.duration);
                if let Some(at) = leaves_by(end) {
                    now = at;
                    action.caller_left(at);
                    continue;
                }
                now = end;
                let retry_after = scripted
                    .retry_after
                    .as_deref()
                    .map_or(RetryAfter::Missing, RetryAfter::parse);
                action.response(now, scripted.status, &retry_after, case.calendar_at(now))
            }
            Decision::WaitUntil(until) => {
                let late = case
                    .wake_late_by
                    .get(waits_seen)
                    .copied()
                    .unwrap_or_default();
                waits_seen += 1;
                let wake = until.saturating_add(late);
                if let Some(at) = leaves_by(wake) {
                    now = at;
                    action.caller_left(at);
                    continue;
                }
                now = wake;
                action.timer_woke(now)
            }
            Decision::Stop(_) => break,
        };
    }
    action.report().ok_or_else(|| InvalidData {
        message: "the action did not stop".into(),
    })
}

/// A fixture document that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FixtureError {
    /// Not JSON at all.
    #[error("not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A field is missing, of the wrong type, or out of range.
    #[error("{path}: {message}")]
    Field {
        /// Where, e.g. `cases[3] ("invalid_nan").attempts[0].duration_s`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

fn field_error(path: impl fmt::Display, message: impl fmt::Display) -> FixtureError {
    FixtureError::Field {
        path: path.to_string(),
        message: message.to_string(),
    }
}

#[derive(Deserialize)]
struct RawDoc {
    policy: Value,
    calendar_epoch: String,
    cases: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    total_budget_s: Option<f64>,
    max_attempts: Option<u32>,
    attempt_cap_s: Option<f64>,
    min_wait_s: Option<f64>,
    fallback_base_s: Option<u32>,
    retry_statuses: Option<Vec<u16>>,
}

#[derive(Deserialize)]
struct RawCase {
    id: String,
    #[serde(default)]
    title: Option<String>,
    attempts: Vec<RawAttempt>,
    #[serde(default = "yes")]
    clock_trusted: bool,
    #[serde(default)]
    leave_at_s: Option<f64>,
    #[serde(default)]
    wake_late_by_s: Vec<f64>,
    #[serde(default)]
    calendar_jumps: Vec<RawJump>,
    #[serde(default)]
    policy: Option<Value>,
    #[serde(default)]
    calendar_epoch: Option<String>,
    #[serde(default)]
    expect: Option<Value>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAttempt {
    duration_s: f64,
    status: u16,
    #[serde(default)]
    retry_after: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJump {
    at_s: f64,
    by_s: f64,
}

fn typed<T: DeserializeOwned>(value: Value, path: &str) -> Result<T, FixtureError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let inner = err.path().to_string();
        let full = if inner == "." {
            path.to_string()
        } else if path.is_empty() {
            inner
        } else {
            format!("{path}.{inner}")
        };
        field_error(full, err.into_inner())
    })
}

fn seconds(value: f64, path: impl fmt::Display) -> Result<Duration, FixtureError> {
    Duration::try_from_secs_f64(value).map_err(|_| {
        field_error(
            path,
            format!("{value} is not a non-negative number of seconds"),
        )
    })
}

fn date(text: &str, path: &str) -> Result<SystemTime, FixtureError> {
    httpdate::parse_http_date(text)
        .map_err(|_| field_error(path, format!("{text:?} is not an HTTP-date")))
}

fn policy(raw: Value, base: Policy, path: &str) -> Result<Policy, FixtureError> {
    let raw: RawPolicy = typed(raw, path)?;
    let mut builder = base.to_builder();
    if let Some(v) = raw.total_budget_s {
        builder = builder.total_budget(seconds(v, format!("{path}.total_budget_s"))?);
    }
    if let Some(v) = raw.max_attempts {
        builder = builder.max_attempts(v);
    }
    if let Some(v) = raw.attempt_cap_s {
        builder = builder.attempt_cap(seconds(v, format!("{path}.attempt_cap_s"))?);
    }
    if let Some(v) = raw.min_wait_s {
        builder = builder.min_wait(seconds(v, format!("{path}.min_wait_s"))?);
    }
    if let Some(v) = raw.fallback_base_s {
        builder = builder.fallback_base(v);
    }
    if let Some(v) = raw.retry_statuses {
        builder = builder.retry_statuses(v);
    }
    builder.build().map_err(|e| field_error(path, e))
}

/// Parses a fixture document.
///
/// # Errors
///
/// [`FixtureError::Json`] for text that is not JSON; [`FixtureError::Field`],
/// naming the case and the field, for a missing field, a wrong type, a
/// negative duration, an invalid policy or date.
pub fn parse(text: &str) -> Result<Fixture, FixtureError> {
    let value: Value = serde_json::from_str(text)?;
    let doc: RawDoc = typed(value, "")?;
    let base = policy(doc.policy, Policy::default(), "policy")?;
    let calendar_epoch = date(&doc.calendar_epoch, "calendar_epoch")?;
    let cases = doc
        .cases
        .into_iter()
        .enumerate()
        .map(|(index, raw)| parse_case(index, raw, base, calendar_epoch))
        .collect::<Result<_, _>>()?;
    Ok(Fixture {
        policy: base,
        calendar_epoch,
        cases,
    })
}

fn parse_case(
    index: usize,
    raw: Value,
    base: Policy,
    epoch: SystemTime,
) -> Result<Case, FixtureError> {
    let path = match raw.get("id").and_then(Value::as_str) {
        Some(id) => format!("cases[{index}] ({id:?})"),
        None => format!("cases[{index}]"),
    };
    let raw: RawCase = typed(raw, &path)?;
    let policy = match raw.policy {
        Some(over) => policy(over, base, &format!("{path}.policy"))?,
        None => base,
    };
    let calendar_epoch = match &raw.calendar_epoch {
        Some(text) => date(text, &format!("{path}.calendar_epoch"))?,
        None => epoch,
    };
    let attempts = raw
        .attempts
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            Ok(ScriptedAttempt {
                duration: seconds(a.duration_s, format!("{path}.attempts[{i}].duration_s"))?,
                status: a.status,
                retry_after: a.retry_after,
            })
        })
        .collect::<Result<_, FixtureError>>()?;
    let leave_at = raw
        .leave_at_s
        .map(|v| seconds(v, format!("{path}.leave_at_s")))
        .transpose()?;
    let wake_late_by = raw
        .wake_late_by_s
        .iter()
        .enumerate()
        .map(|(i, v)| seconds(*v, format!("{path}.wake_late_by_s[{i}]")))
        .collect::<Result<_, _>>()?;
    let calendar_jumps = raw
        .calendar_jumps
        .iter()
        .enumerate()
        .map(|(i, j)| {
            let at = seconds(j.at_s, format!("{path}.calendar_jumps[{i}].at_s"))?;
            let nanos = j.by_s * 1e9;
            if !nanos.is_finite() || nanos.abs() > 1e27 {
                return Err(field_error(
                    format!("{path}.calendar_jumps[{i}].by_s"),
                    "out of range",
                ));
            }
            Ok(CalendarJump {
                at,
                by_nanos: nanos.round() as i128,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Case {
        id: raw.id,
        title: raw.title,
        policy,
        calendar_epoch,
        attempts,
        clock_trusted: raw.clock_trusted,
        leave_at,
        wake_late_by,
        calendar_jumps,
        expect: raw.expect,
    })
}

/// One field where a result differs from its expectation.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    /// The field, e.g. `starts_s[1]`.
    pub field: String,
    /// What `expect` says.
    pub expected: Value,
    /// What the replay produced (`null` when absent).
    pub actual: Value,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: expected {}, got {}",
            self.field, self.expected, self.actual
        )
    }
}

/// Compares a result object with an `expect` object, field by field, for
/// every key that `expect` names. Numbers compare by value (`14` equals
/// `14.0`).
pub fn mismatches(actual: &Value, expect: &Value) -> Vec<Mismatch> {
    let mut out = Vec::new();
    match expect.as_object() {
        Some(fields) => {
            for (key, expected) in fields {
                let got = actual.get(key).unwrap_or(&Value::Null);
                compare(key.clone(), got, expected, &mut out);
            }
        }
        None => compare(String::new(), actual, expect, &mut out),
    }
    out
}

fn compare(field: String, actual: &Value, expected: &Value, out: &mut Vec<Mismatch>) {
    let same = match (actual, expected) {
        (Value::Number(a), Value::Number(e)) => match (a.as_f64(), e.as_f64()) {
            (Some(a), Some(e)) => (a - e).abs() <= 1e-9,
            _ => a == e,
        },
        (Value::Array(a), Value::Array(e)) if a.len() == e.len() => {
            for (i, (a, e)) in a.iter().zip(e).enumerate() {
                compare(format!("{field}[{i}]"), a, e, out);
            }
            return;
        }
        (Value::Object(_), Value::Object(_)) => {
            for m in mismatches(actual, expected) {
                out.push(Mismatch {
                    field: format!("{field}.{}", m.field),
                    ..m
                });
            }
            return;
        }
        _ => actual == expected,
    };
    if !same {
        out.push(Mismatch {
            field,
            expected: expected.clone(),
            actual: actual.clone(),
        });
    }
}
