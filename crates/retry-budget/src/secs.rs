//! Durations as JSON numbers of seconds.

use std::time::Duration;

use serde::Serializer;

pub(crate) fn ser<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

pub(crate) fn ser_opt<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

pub(crate) fn ser_list<S: Serializer>(ds: &[Duration], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(ds.iter().map(Duration::as_secs_f64))
}

pub(crate) fn ser_spans<S: Serializer>(
    ds: &[(Duration, Duration)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(ds.iter().map(|(a, b)| [a.as_secs_f64(), b.as_secs_f64()]))
}
