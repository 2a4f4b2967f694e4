//! What a request carries for the retry layer (the caller's report slot,
//! cancellation token and action id; a replay handle), one extension each
//! or the caller's three in one [`CallerExtensions`], and the layer's extra
//! that reads them all at once: one part of the action for all of them.

use std::fmt;
use std::task::Context;

use http::Extensions;
use retry_budget::{Answer, Report};
use tokio_util::sync::CancellationToken;

use crate::body_replay::ReplayHandle;
use crate::cancel::Watched;
use crate::clock::Clock;
use crate::extra::{ActionExtra, Moments};
use crate::report_slot::ReportSlot;

/// Identifies one action (one budgeted request) for an
/// [`Observer`](crate::observer::Observer).
///
/// A caller may insert one in the request's extensions (or give it in
/// [`CallerExtensions`]) to recognise its request; otherwise the layer
/// assigns one from a counter shared by the layer and every service it
/// made (0, 1, 2, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionId(pub u64);

impl fmt::Display for ActionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Request extension: the caller's [`ReportSlot`], cancellation token and
/// [`ActionId`] in one extension, for a caller that gives the layer more
/// than one of them (a proxy gives all three to every request). The layer
/// reads them as it reads each inserted on its own; a field left `None`
/// is looked for as its own extension, and a field given here is used
/// rather than its own extension.
///
/// One extension is one entry in the request's extension map, which every
/// attempt's copy of the request clones: three in one make the map and
/// each copy of it smaller.
///
/// ```
/// use std::convert::Infallible;
/// use tokio_util::sync::CancellationToken;
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_retry_budget::observer::ActionId;
/// use tower_retry_budget::{CallerExtensions, Outcome, Policy, ReportSlot, RetryBudgetLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let upstream = service_fn(|_req: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(()))
/// });
/// let client = ServiceBuilder::new()
///     .layer(RetryBudgetLayer::new(Policy::default()))
///     .service(upstream);
///
/// let slot = ReportSlot::new();
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(CallerExtensions {
///     slot: Some(slot.clone()),
///     cancel: Some(CancellationToken::new()),
///     id: Some(ActionId(7)),
/// });
/// let _ = client.oneshot(request).await;
/// assert_eq!(slot.take().unwrap().outcome, Outcome::Success);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct CallerExtensions {
    /// Filled with the action's report, as a [`ReportSlot`] inserted on
    /// its own is.
    pub slot: Option<ReportSlot>,
    /// When it fires, the action stops as the caller leaving, as a
    /// [`CancellationToken`] inserted on its own makes it.
    pub cancel: Option<CancellationToken>,
    /// The action's id for the observer, as an [`ActionId`] inserted on
    /// its own is.
    pub id: Option<ActionId>,
}

/// The caller's report slot in `extensions`: in its [`CallerExtensions`],
/// else on its own.
pub(crate) fn slot(extensions: &Extensions) -> Option<&ReportSlot> {
    slot_in(extensions.get::<CallerExtensions>(), extensions)
}

/// [`slot`], with the [`CallerExtensions`] of `extensions` (if any)
/// already looked up.
fn slot_in<'a>(
    given: Option<&'a CallerExtensions>,
    extensions: &'a Extensions,
) -> Option<&'a ReportSlot> {
    given
        .and_then(|given| given.slot.as_ref())
        .or_else(|| extensions.get::<ReportSlot>())
}

/// The caller's action id in `extensions`: in its [`CallerExtensions`],
/// else on its own.
pub(crate) fn id(extensions: &Extensions) -> Option<ActionId> {
    let given = extensions.get::<CallerExtensions>();
    given
        .and_then(|given| given.id)
        .or_else(|| extensions.get::<ActionId>().copied())
}

/// What a request with these extensions carries for the layer (the
/// caller's report slot and cancellation token, a replay handle), as one
/// part of its action; `None` if it carries none of them.
pub(crate) fn carried(extensions: &Extensions) -> Option<CarriedPart> {
    let given = extensions.get::<CallerExtensions>();
    let slot = slot_in(given, extensions);
    let token = given
        .and_then(|given| given.cancel.as_ref())
        .or_else(|| extensions.get::<CancellationToken>());
    let replay = extensions.get::<ReplayHandle>();
    if slot.is_none() && token.is_none() && replay.is_none() {
        return None;
    }
    Some(CarriedPart {
        slot: slot.cloned(),
        watched: token.map(Watched::new),
        replay: replay.cloned(),
    })
}

/// What one request carries, as one part of its action: each acts on its
/// own moments (no two on the same one).
pub(crate) struct CarriedPart {
    slot: Option<ReportSlot>,
    watched: Option<Watched>,
    replay: Option<ReplayHandle>,
}

impl ActionExtra for CarriedPart {
    const MOMENTS: Moments = Moments::ANSWER.and(Moments::CANCELLED).and(Moments::REPORT);

    fn answer(&mut self, answer: &mut Answer<'_>) {
        if let Some(replay) = &mut self.replay {
            replay.answer(answer);
        }
    }

    fn cancelled(&mut self, cx: &mut Context<'_>) -> bool {
        self.watched
            .as_mut()
            .is_some_and(|watched| watched.cancelled(cx))
    }

    fn wants_report(&self) -> bool {
        self.slot.is_some()
    }

    fn report(&mut self, report: &Report, clock: &mut Clock) {
        if let Some(slot) = &mut self.slot {
            slot.report(report, clock);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::task::Waker;

    use retry_budget::{Action, Policy};

    use super::*;

    #[test]
    fn only_a_request_with_a_token_is_watched_and_it_fires_once_cancelled() {
        let (plain, ()) = http::Request::new(()).into_parts();
        assert!(carried(&plain.extensions).is_none());

        let token = CancellationToken::new();
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(token.clone());
        let mut watched = carried(&parts.extensions).unwrap();
        assert!(watched.slot.is_none() && watched.replay.is_none());
        assert!(!watched.wants_report());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(!watched.cancelled(&mut cx));
        token.cancel();
        assert!(watched.cancelled(&mut cx));
    }

    #[tokio::test(start_paused = true)]
    async fn the_slot_a_request_carries_gets_the_report() {
        let slot = ReportSlot::new();
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(slot.clone());
        let mut part = carried(&parts.extensions).unwrap();
        assert!(part.wants_report());
        assert!(part.watched.is_none() && part.replay.is_none());

        let mut action = Action::new(Arc::new(Policy::default()));
        action.caller_left(std::time::Duration::ZERO);
        let report = action.take_report().expect("stopped");
        let mut clock = Clock::start();
        part.report(&report, &mut clock);
        assert_eq!(slot.get().map(|r| r.outcome), Some(report.outcome));
        assert_eq!(slot.origin(), Some(clock.origin()));
    }

    #[test]
    fn the_callers_three_in_one_extension_are_read_before_their_own() {
        let (own_slot, given_slot) = (ReportSlot::new(), ReportSlot::new());
        let (own_token, given_token) = (CancellationToken::new(), CancellationToken::new());
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.extensions.insert(own_slot.clone());
        parts.extensions.insert(own_token.clone());
        parts.extensions.insert(ActionId(1));
        parts.extensions.insert(CallerExtensions {
            slot: Some(given_slot.clone()),
            cancel: Some(given_token.clone()),
            id: Some(ActionId(2)),
        });
        assert_eq!(id(&parts.extensions), Some(ActionId(2)));
        let mut part = carried(&parts.extensions).unwrap();
        assert!(part.wants_report() && part.watched.is_some() && part.replay.is_none());
        let mut cx = Context::from_waker(Waker::noop());
        own_token.cancel();
        assert!(!part.cancelled(&mut cx));
        given_token.cancel();
        assert!(part.cancelled(&mut cx));
        let mut action = Action::new(Arc::new(Policy::default()));
        action.caller_left(std::time::Duration::ZERO);
        let report = action.take_report().expect("stopped");
        part.report(&report, &mut Clock::unread());
        assert!(given_slot.get().is_some() && own_slot.get().is_none());

        // A field left out: its own extension is read.
        parts.extensions.insert(CallerExtensions::default());
        assert_eq!(id(&parts.extensions), Some(ActionId(1)));
        slot(&parts.extensions).unwrap().fill(report, None);
        assert!(own_slot.get().is_some());
    }
}
