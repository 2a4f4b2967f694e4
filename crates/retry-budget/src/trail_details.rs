//! What a response's delays add to the trail, for a status the policy
//! retries: a repeated `Retry-After`, the near-miss dates accepted, every
//! `retry-after-ms` and reset header value, each marked used or not as
//! [`asked_delay::choose`](crate::asked_delay::choose) decided.

use std::time::{Duration, SystemTime};

use crate::api_signals::RetryAfterMs;
use crate::asked_delay::AskedDelay;
use crate::pace::{QuotaNote, MAX_QUOTA_NOTES};
use crate::reset::{ResetIgnored, ResetReading};
use crate::retry_after::RetryAfter;
use crate::trail::{EventKind, ResetRead, Trail};

/// One response of attempt `attempt`, at `at` under a total budget of
/// `budget`: the fields it was read from, the calendar reading at receipt.
pub(crate) struct Response<'a> {
    pub(crate) at: Duration,
    pub(crate) budget: Duration,
    pub(crate) attempt: u32,
    pub(crate) retry_after: &'a RetryAfter,
    pub(crate) retry_after_ms: Option<&'a RetryAfterMs>,
    pub(crate) calendar: Option<SystemTime>,
}

/// Records the details of `response`'s delays, `delay` being what was
/// chosen from them, in this order: the repeated field, lenient dates,
/// `retry-after-ms` values, reset header values.
pub(crate) fn record(trail: &mut Trail, response: &Response<'_>, delay: &AskedDelay<'_>) {
    let Response {
        at,
        budget,
        attempt,
        retry_after,
        retry_after_ms,
        calendar,
    } = *response;
    let mut push = |kind| trail.record(at, budget, kind);
    if let RetryAfter::Repeated(repeated) = retry_after {
        push(EventKind::RetryAfterRepeated {
            attempt,
            values: u32::try_from(repeated.values().len()).unwrap_or(u32::MAX),
            raw: repeated.raw().to_owned(),
        });
    }
    for date in retry_after.dates() {
        let tolerated = date.tolerated(calendar);
        if let (Some(raw), false) = (date.raw(), tolerated.is_empty()) {
            push(EventKind::LenientDate {
                attempt,
                raw: raw.to_owned(),
                tolerated: tolerated.to_string(),
            });
        }
    }
    for (i, value) in retry_after_ms
        .map_or(&[][..], RetryAfterMs::values)
        .iter()
        .enumerate()
    {
        let reading = match value.wait() {
            Some(wait) => ResetRead::Wait {
                wait,
                used: delay.ms_used == Some(i),
            },
            None => ResetRead::Ignored {
                why: ResetIgnored::Malformed,
            },
        };
        push(EventKind::RetryAfterMs {
            attempt,
            raw: value.raw().into(),
            reading,
        });
    }
    for (i, (value, reading)) in delay.resets.iter().enumerate() {
        let reading = match reading {
            ResetReading::Wait(wait) => ResetRead::Wait {
                wait: *wait,
                used: delay.reset_used == Some(i),
            },
            ResetReading::Ignored(why) => ResetRead::Ignored { why: *why },
        };
        push(EventKind::ResetHeader {
            attempt,
            header: value.header().into(),
            format: value.format(),
            raw: value.raw().into_boxed_str(),
            reading,
        });
    }
}

/// Records the quota fields of a response of attempt `attempt` that were
/// set aside or clamped, at most [`MAX_QUOTA_NOTES`].
pub(crate) fn quota(
    trail: &mut Trail,
    at: Duration,
    budget: Duration,
    attempt: u32,
    notes: &[QuotaNote],
) {
    for note in notes.iter().take(MAX_QUOTA_NOTES) {
        trail.record(
            at,
            budget,
            EventKind::QuotaField {
                attempt,
                header: note.header.as_str().into(),
                raw: note.raw.as_str().into(),
                why: note.why,
            },
        );
    }
}
