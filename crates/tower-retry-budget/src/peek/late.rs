//! A gRPC status in trailers after data: who hears of it (the caller's
//! [`ReportSlot`], the layer's observer), and the report corrected as the
//! core rules.
#![deny(clippy::arithmetic_side_effects)] // time is saturating here too

use http::{Extensions, HeaderMap, StatusCode};

use crate::caller;
use crate::observer::{self, Observed};
use crate::report_slot::{LateReport, ReportSlot};
use crate::response_signal::{GrpcSignal, RetrySignal};

/// Who hears of a status that comes after data: the caller's slot and the
/// layer's observer, as the attempt request carried them.
#[derive(Debug, Default)]
pub(super) struct Listeners {
    slot: Option<ReportSlot>,
    observer: Option<Observed>,
}

impl Listeners {
    /// The listeners an attempt request carries.
    pub(super) fn of(extensions: &Extensions) -> Self {
        Self {
            slot: caller::slot(extensions).cloned(),
            observer: extensions.get::<Observed>().cloned(),
        }
    }

    /// Starts watching for a late status, if anyone listens. The report to
    /// correct is the one in the caller's slot; with an observer and no
    /// slot, one the retry layer fills when it returns the response (asked
    /// for in the response's `extensions`).
    pub(super) fn watch(self, extensions: &mut Extensions) -> Option<Watch> {
        let slot = match self.slot {
            Some(slot) => slot,
            None => {
                self.observer.as_ref()?;
                let slot = ReportSlot::new();
                extensions.insert(LateReport(slot.clone()));
                slot
            }
        };
        Some(Watch {
            slot,
            observer: self.observer.map(|Observed(watch)| watch),
        })
    }
}

/// After data, the call's status comes in the trailers: a non-OK one
/// corrects the report in the slot and is told to the observer.
#[derive(Debug)]
pub(super) struct Watch {
    slot: ReportSlot,
    observer: Option<observer::Watch>,
}

impl Watch {
    pub(super) fn trailers(self, trailers: &HeaderMap) {
        let signal = GrpcSignal.read(StatusCode::OK, trailers, &Extensions::new());
        if signal.status() == StatusCode::OK.as_u16() {
            return;
        }
        // Only a budgeted call that has stopped has a report to correct.
        let Some(mut report) = self.slot.get() else {
            return;
        };
        // On the action's own clock: elapsed since the origin the retry
        // layer gave with the report (without one, its stop is the latest
        // time known).
        let origin = self.slot.origin();
        let at = origin.map_or(report.elapsed, crate::clock::elapsed_since);
        let from = format!(
            "{}, in trailers after data",
            signal.translation().unwrap_or("grpc-status")
        );
        let seen = report.events.len();
        // The core decides what the late status changes.
        if report.status_after_data(at, signal.status(), from) {
            let traced = crate::trace::listening();
            let observer = self.observer.as_ref();
            crate::trace::told(&report.events, seen, traced, |event| {
                if let Some(observer) = observer {
                    observer.event(event);
                }
            });
            if let Some(observer) = &self.observer {
                observer.report(&report);
            }
            self.slot.fill(report, origin);
        }
    }
}
