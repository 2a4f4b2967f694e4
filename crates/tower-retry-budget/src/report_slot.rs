//! [`ReportSlot`]: the report for callers whose client drops the response's
//! extensions.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use retry_budget::Report;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::extra::ActionExtra;

/// A place for the [`Report`] of one request, shared between the caller and
/// the layer.
///
/// The layer puts the [`Report`] in the final response's extensions (and in
/// its [`Error`](crate::Error)). A client on top may not hand those back:
/// tonic turns a non-OK `grpc-status` into a `tonic::Status`, which keeps the
/// headers as metadata but not the extensions. A `ReportSlot` put in the
/// request's extensions is filled with a copy of the report whenever the
/// action stops, whatever its ending (a response, an error, nothing sent,
/// or the caller dropping the future: `cancelled`), and read by the caller
/// afterwards.
///
/// Only budgeted requests have a report: a request that passes through (an
/// unsafe method not marked [`Idempotent`](crate::Idempotent)) leaves the
/// slot empty.
///
/// ```
/// use std::convert::Infallible;
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_retry_budget::{Outcome, Policy, ReportSlot, RetryBudgetLayer};
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
/// request.extensions_mut().insert(slot.clone());
/// let _ = client.oneshot(request).await;
/// assert_eq!(slot.take().unwrap().outcome, Outcome::Success);
/// # }
/// ```
#[derive(Clone, Default)]
pub struct ReportSlot(Arc<Mutex<Filled>>);

/// The report, and the instant its elapsed times count from (the action's
/// origin on tokio's clock), so that a layer that corrects the report later
/// dates its event on the same clock.
#[derive(Default)]
struct Filled {
    report: Option<Report>,
    origin: Option<Instant>,
}

impl ReportSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the report out, if the action has stopped.
    pub fn take(&self) -> Option<Report> {
        self.lock().report.take()
    }

    /// A copy of the report, if the action has stopped.
    pub fn get(&self) -> Option<Report> {
        self.lock().report.clone()
    }

    pub(crate) fn fill(&self, report: Report, origin: Option<Instant>) {
        // Written field by field: the report is moved once, into the slot.
        let mut filled = self.lock();
        filled.report = Some(report);
        filled.origin = origin;
    }

    /// The instant the report's elapsed times count from, as the layer
    /// gave it with the report (it reads its clock's origin to fill a
    /// slot); `None` before the slot is filled.
    pub(crate) fn origin(&self) -> Option<Instant> {
        self.lock().origin
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Filled> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for ReportSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReportSlot")
            .field("outcome", &self.lock().report.as_ref().map(|r| r.outcome))
            .finish()
    }
}

/// A slot a layer below asks the retry layer to fill, through the
/// response's extensions: the gRPC peek watching for a status after data
/// when the caller gave no slot but an observer is configured. The retry
/// layer removes it from the response and fills it with the report.
#[derive(Debug, Clone)]
pub(crate) struct LateReport(pub(crate) ReportSlot);

/// The retry layer's part that fills the [`ReportSlot`] a request carries
/// (found with what else it carries, in `caller.rs`).
impl ActionExtra for ReportSlot {
    fn wants_report(&self) -> bool {
        true
    }

    fn report(&mut self, report: &Report, clock: &mut Clock) {
        self.fill(report.clone(), Some(clock.origin()));
    }
}
