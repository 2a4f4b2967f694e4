//! [`Observer`]: the trail of every action, typed, as it is recorded.
//!
//! # Why
//!
//! `tracing` events are for logs: their messages are text, and a program
//! that reads them (a progress display, a metrics exporter) would depend on
//! the wording. An observer receives the same steps as typed
//! [`Event`]s, in order, each with the [`ActionId`] of the request it
//! belongs to, and the final [`Report`] once the action ends.
//!
//! The observer is called on the request's own task, inline: keep it short
//! (count, send on a channel, print a line) and never block in it.

pub use crate::caller::ActionId;
pub use retry_budget::trail::{Event, EventKind};

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::request::Parts;
use http::{Extensions, Method};
use retry_budget::Report;

use crate::caller;
use crate::clock::Clock;
use crate::extra::{ActionExtra, Extra, Moments};
use crate::report_slot::LateReport;
use crate::response_signal::is_grpc;

/// Receives every step of every budgeted action, typed, with its
/// [`ActionId`], and each action's final [`Report`]. Installed with
/// [`RetryBudgetLayer::observer`](crate::RetryBudgetLayer::observer).
///
/// A closure `Fn(ActionId, &Event)` is an observer. It is called on the
/// request's own task, inline: keep it short (count, send on a channel,
/// print a line) and never block in it.
///
/// ```
/// use std::convert::Infallible;
/// use std::sync::{Arc, Mutex};
///
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_retry_budget::{observer::{ActionId, Event, EventKind}, Policy, RetryBudgetLayer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let seen = Arc::new(Mutex::new(Vec::new()));
/// let sink = seen.clone();
/// let layer = RetryBudgetLayer::new(Policy::default()).observer(move |id: ActionId, event: &Event| {
///     sink.lock().unwrap().push((id, event.kind.clone()));
/// });
/// let upstream = service_fn(|_req: http::Request<()>| async {
///     Ok::<_, Infallible>(http::Response::new(()))
/// });
/// let client = ServiceBuilder::new().layer(layer).service(upstream);
/// client.oneshot(http::Request::new(())).await.unwrap();
///
/// let seen = seen.lock().unwrap();
/// assert!(matches!(seen[0].1, EventKind::AttemptStarted { attempt: 1, .. }));
/// assert!(matches!(seen.last().unwrap().1, EventKind::Stopped { .. }));
/// # }
/// ```
pub trait Observer: Send + Sync + 'static {
    /// Called for every trail event, in order, as it is recorded.
    fn on_event(&self, id: ActionId, event: &Event);

    /// Called when the action ends, with its report (default: nothing).
    /// Once, except for a gRPC stream whose status, after its messages, is
    /// not OK: with [`PeekLayer::grpc`](crate::peek::PeekLayer::grpc) below
    /// the retry layer, the corrected report follows its `StatusAfterData`
    /// event when the trailers arrive.
    fn on_report(&self, id: ActionId, report: &Report) {
        let _ = (id, report);
    }
}

impl<F> Observer for F
where
    F: Fn(ActionId, &Event) + Send + Sync + 'static,
{
    fn on_event(&self, id: ActionId, event: &Event) {
        self(id, event);
    }
}

/// The layer's observer and its id counter, shared by its clones.
#[derive(Clone)]
pub(crate) struct SharedObserver {
    observer: Arc<dyn Observer>,
    next_id: Arc<AtomicU64>,
}

impl SharedObserver {
    pub(crate) fn new(observer: impl Observer) -> Self {
        Self {
            observer: Arc::new(observer),
            next_id: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The watch of one action: the caller's id if the request has one,
    /// else the next from the counter.
    pub(crate) fn watch(&self, given: Option<ActionId>) -> Watch {
        let id = given.unwrap_or_else(|| ActionId(self.next_id.fetch_add(1, Ordering::Relaxed)));
        Watch {
            id,
            observer: self.observer.clone(),
        }
    }
}

impl fmt::Debug for SharedObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedObserver(..)")
    }
}

/// The observer as an extra of the retry layer: each action gets a
/// [`Watch`] (the caller's [`ActionId`] if the request has one, else the
/// next from the counter).
impl Extra for SharedObserver {
    type Part = Watching;

    /// With an observer, a gRPC request (and so every attempt's copy of it)
    /// carries the action's [`Observed`] for the layer below that reads a
    /// status from trailers ([`Peek`](crate::peek::Peek),
    /// the one reader): its answer has the request's gRPC content type. Any
    /// other request does not, and its copies carry one extension fewer
    /// (every gRPC call is a `POST`: no other method's fields are looked
    /// at).
    fn start(&self, request: Option<&mut Parts>) -> Option<Watching> {
        let Some(request) = request else {
            return Some(Watching {
                watch: self.watch(None),
                carried: false,
            });
        };
        let watch = self.watch(caller::id(&request.extensions));
        let carried = request.method == Method::POST && is_grpc(&request.headers);
        if carried {
            request.extensions.insert(Observed(watch.clone()));
        }
        Some(Watching { watch, carried })
    }
}

/// One action's [`Watch`] as its part of the action, and whether the
/// request carries it down as [`Observed`]: only then may a layer below
/// ask for a late report, and only then is the response looked at for
/// that.
pub(crate) struct Watching {
    watch: Watch,
    carried: bool,
}

impl ActionExtra for Watching {
    /// Its deliver acts only when the request carries the watch.
    const MOMENTS: Moments = Moments::REPORT.and(Moments::DELIVER);

    fn listens(&self) -> bool {
        true
    }

    fn event(&mut self, event: &Event) {
        self.watch.event(event);
    }

    fn wants_report(&self) -> bool {
        true
    }

    fn report(&mut self, report: &Report, _: &mut Clock) {
        self.watch.report(report);
    }

    /// A layer below that watches the body for a late status, and has no
    /// slot of the caller's to correct, asked for a copy of the report: it
    /// asks only when the request told it an observer listens (this
    /// action's [`Observed`]).
    fn deliver(&mut self, extensions: &mut Extensions, report: &Report, clock: &mut Clock) {
        if !self.carried {
            return;
        }
        if let Some(late) = extensions.remove::<LateReport>() {
            late.0.fill(report.clone(), Some(clock.origin()));
        }
    }
}

/// An action's observer and id, in every attempt request's extensions (when
/// an observer is configured), for a layer below that learns something
/// after the response was returned: the gRPC peek's status after data.
/// Only this crate makes one.
#[derive(Debug, Clone)]
pub(crate) struct Observed(pub(crate) Watch);

/// One action's observer and id.
#[derive(Clone)]
pub(crate) struct Watch {
    id: ActionId,
    observer: Arc<dyn Observer>,
}

impl Watch {
    pub(crate) fn event(&self, event: &Event) {
        self.observer.on_event(self.id, event);
    }

    pub(crate) fn report(&self, report: &Report) {
        self.observer.on_report(self.id, report);
    }
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Watch").field(&self.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Silent;
    impl Observer for Silent {
        fn on_event(&self, _: ActionId, _: &Event) {}
    }

    #[test]
    fn only_a_grpc_request_carries_the_observer_to_the_layers_below() {
        let observer = SharedObserver::new(Silent);
        for (method, content_type, carried) in [
            (Method::POST, Some("application/grpc"), true),
            (Method::POST, Some("application/grpc+proto"), true),
            (Method::POST, Some("application/json"), false),
            (Method::POST, None, false),
            // Not a gRPC call, whatever its fields say.
            (Method::GET, Some("application/grpc"), false),
        ] {
            let mut builder = http::Request::builder()
                .method(method)
                .uri("http://svc.test/x");
            if let Some(value) = content_type {
                builder = builder.header(http::header::CONTENT_TYPE, value);
            }
            let (mut parts, ()) = builder.body(()).unwrap().into_parts();
            let watch = observer.start(Some(&mut parts)).expect("an observer");
            assert!(watch.listens() && watch.wants_report());
            assert_eq!(
                parts.extensions.get::<Observed>().is_some(),
                carried,
                "{content_type:?}"
            );
        }
    }
}
