//! `tracing` events for the trail: one event per step, with the trail's
//! fields. Of a response's headers, only `Retry-After` is ever logged (and,
//! with [`GrpcSignal`](crate::response_signal::GrpcSignal), `grpc-status` and
//! `grpc-retry-pushback-ms`); request headers (Authorization, Cookie, ...)
//! never are.
//!
//! **Every event is at DEBUG**, target `retry_budget`, including the stop,
//! whatever its outcome. A library runs on every request of its user: an
//! action that ends normally (a success, a status the policy does not
//! retry) must not write a line at INFO. Nor does one that ran out of
//! budget or attempts, a throttled retry, a hold-off or an unavailable
//! shared store: each is an outcome the caller receives as a value (the
//! [`Report`](crate::Report), [`Error`](crate::Error)), the observer
//! counts them for metrics, and during a 429 storm one line per request at
//! INFO or WARN would flood the service's logs just when they matter. An
//! application that wants them logged does so from the report (the CLI and
//! the proxy write one line per action).

use std::time::Duration;

use retry_budget::{
    trail::{Event, EventKind, Trail, WaitBasis},
    trail_text::{basis_name, Note},
    Action, Decision,
};

fn secs(d: std::time::Duration) -> f64 {
    d.as_secs_f64()
}

/// Feeds one input to `action` at elapsed `now`, traces the events it
/// added if `traced` (the action's [`listening`], read when it started)
/// and hands them to `hear` (the action's listening extras): the only way
/// the adapter talks to the core.
pub(crate) fn step(
    action: &mut Action,
    now: Duration,
    traced: bool,
    hear: impl FnMut(&Event),
    input: impl FnOnce(&mut Action, Duration) -> Decision,
) -> Decision {
    let seen = action.trail().len();
    let decision = input(action, now);
    told(action.trail(), seen, traced, hear);
    decision
}

/// The trail's events from `from` on: traced if `traced` (the action's
/// [`listening`]), and given to `hear`. Read with [`Trail::each_from`], so
/// that a trail nobody else reads is not written out for them.
pub(crate) fn told(trail: &Trail, from: usize, traced: bool, mut hear: impl FnMut(&Event)) {
    trail.each_from(from, |event| {
        if traced {
            emit(event);
        }
        hear(event);
    });
}

/// Whether a `tracing` subscriber wants the trail's events (target
/// `retry_budget`, level DEBUG, the level of every one of them): one
/// `enabled!` check per action, read when it starts (a subscriber set
/// later hears the actions started after it). Without one (a service
/// logging at INFO, the usual case), nothing is formatted or matched.
#[inline(always)]
pub(crate) fn listening() -> bool {
    tracing::enabled!(target: "retry_budget", tracing::Level::DEBUG)
}

/// Emits the `tracing` event of one trail event (target `retry_budget`).
fn emit(event: &Event) {
    let at_s = secs(event.at);
    let remaining_budget_s = secs(event.remaining_budget);
    match &event.kind {
        EventKind::AttemptStarted {
            attempt,
            reservation_end,
        } => tracing::debug!(
            target: "retry_budget",
            at_s, remaining_budget_s, attempt,
            reservation_end_s = secs(*reservation_end),
            "attempt started"
        ),
        EventKind::Response {
            attempt,
            status,
            retry_after,
        } => {
            tracing::debug!(
                target: "retry_budget",
                at_s, remaining_budget_s, attempt, status,
                retry_after = %retry_after,
                "response"
            );
        }
        EventKind::WaitPlanned {
            wait,
            until,
            reservation_end,
            basis,
        } => {
            let source = basis_name(basis);
            let requested_s = match basis {
                WaitBasis::Server { requested } | WaitBasis::ResetHeader { requested } => {
                    Some(secs(*requested))
                }
                _ => None,
            };
            tracing::debug!(
                target: "retry_budget",
                at_s, remaining_budget_s,
                wait_s = secs(*wait),
                until_s = secs(*until),
                reservation_end_s = secs(*reservation_end),
                source, requested_s,
                "wait planned"
            );
        }
        EventKind::Woke {
            waited_from,
            late_by,
        } => tracing::debug!(
            target: "retry_budget",
            at_s, remaining_budget_s,
            waited_from_s = secs(*waited_from),
            late_by_s = secs(*late_by),
            "woke"
        ),
        EventKind::CallerLeft { waited_from } => tracing::debug!(
            target: "retry_budget",
            at_s, remaining_budget_s,
            waited_from_s = waited_from.map(secs),
            "caller left"
        ),
        EventKind::AttemptTimedOut { attempt } => tracing::debug!(
            target: "retry_budget",
            at_s, remaining_budget_s, attempt,
            "attempt timed out"
        ),
        EventKind::TransportFailed { attempt } => tracing::debug!(
            target: "retry_budget",
            at_s, remaining_budget_s, attempt,
            "transport failed"
        ),
        EventKind::Stopped { outcome } => tracing::debug!(
            target: "retry_budget",
            at_s, remaining_budget_s,
            outcome = outcome.as_str(),
            "stopped"
        ),
        EventKind::RetryRefused { attempt } => tracing::debug!(
            target: "retry_budget",
            at_s, remaining_budget_s, attempt,
            "retry refused by the client budget"
        ),
        EventKind::HeldOff { until } => tracing::debug!(
            target: "retry_budget",
            at_s, remaining_budget_s,
            until_s = secs(*until),
            "held off"
        ),
        kind => match Note::of(kind) {
            Some(note) => tracing::debug!(
                target: "retry_budget",
                at_s, remaining_budget_s,
                attempt = note.attempt(),
                "{note}"
            ),
            None => tracing::debug!(target: "retry_budget", at_s, remaining_budget_s, "step"),
        },
    }
}
