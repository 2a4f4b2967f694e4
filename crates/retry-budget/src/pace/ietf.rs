//! The IETF fields: `RateLimit` with `RateLimit-Policy` (the current
//! draft's list, parsed with `sfv`), the older dictionary
//! `RateLimit: limit=L, remaining=R, reset=T`, and the separate
//! `RateLimit-Limit`/`-Remaining`/`-Reset`.

use std::time::Duration;

use sfv::{BareItem, Dictionary, List, ListEntry, Parameters, Parser};

use crate::reset::ResetFormat;

use super::fields::Fields;
use super::reader::Sink;
use super::state::{limit_name, LimitKind, QuotaIgnored, QuotaState};

/// One `RateLimit-Policy` item.
struct Policy {
    /// `None`: the older unnamed form (`10;w=60`).
    name: Option<String>,
    quota: Option<u64>,
    window: Option<Duration>,
    kind: LimitKind,
}

/// The name given to the older forms' single limit.
const UNNAMED: &str = "ratelimit";

pub(crate) fn read(fields: &Fields<'_>, x_reset: Option<ResetFormat>, sink: &mut Sink) {
    let policies = fields
        .list("ratelimit-policy")
        .map(|value| policies(&value, sink))
        .unwrap_or_default();
    let before = sink.reading.states.len();
    if let Some(value) = fields.list("ratelimit") {
        if let Ok(list) = Parser::new(&value).parse::<List>() {
            items(&list, &value, &policies, sink);
        } else if let Ok(dictionary) = Parser::new(&value).parse::<Dictionary>() {
            older_dictionary(&dictionary, &value, sink);
        } else {
            sink.reading
                .note("ratelimit", &value, QuotaIgnored::Malformed);
        }
    } else {
        sink.pair(
            fields,
            UNNAMED,
            LimitKind::Requests,
            ["ratelimit-remaining", "ratelimit-reset", "ratelimit-limit"],
            x_reset,
        );
    }
    // The older forms' policy (`10;w=60`) describes their one limit.
    if let Some(unnamed) = policies.iter().find(|p| p.name.is_none()) {
        for state in sink.reading.states.iter_mut().skip(before) {
            if state.name == UNNAMED {
                state.quota = state.quota.or(unnamed.quota);
                state.window = state.window.or(unnamed.window);
            }
        }
    }
}

/// The items of `RateLimit-Policy`; a malformed field is noted.
fn policies(value: &[u8], sink: &mut Sink) -> Vec<Policy> {
    let Ok(list) = Parser::new(value).parse::<List>() else {
        sink.reading
            .note("ratelimit-policy", value, QuotaIgnored::Malformed);
        return Vec::new();
    };
    let mut policies = Vec::new();
    for entry in &list {
        let ListEntry::Item(item) = entry else {
            continue;
        };
        let (name, quota) = match &item.bare_item {
            BareItem::Integer(quota) => (None, u64::try_from(*quota).ok()),
            other => match name_of(other) {
                Some(name) => (Some(name), param(&item.params, "q")),
                None => continue,
            },
        };
        let kind = match item.params.get("qu").and_then(|u| u.as_string()) {
            Some(unit) if unit.as_str() != "requests" => LimitKind::Tokens,
            _ => LimitKind::Requests,
        };
        policies.push(Policy {
            name,
            quota,
            window: param(&item.params, "w").map(Duration::from_secs),
            kind,
        });
    }
    policies
}

/// The current draft: `"name";r=R;t=T`, several per field.
fn items(list: &List, value: &[u8], policies: &[Policy], sink: &mut Sink) {
    for entry in list {
        let ListEntry::Item(item) = entry else {
            sink.reading
                .note("ratelimit", value, QuotaIgnored::Malformed);
            continue;
        };
        let Some(name) = name_of(&item.bare_item) else {
            sink.reading
                .note("ratelimit", value, QuotaIgnored::Malformed);
            continue;
        };
        let (remaining, reset) = match (signed(&item.params, "r"), signed(&item.params, "t")) {
            (Ok(r), Ok(t)) => (r, t),
            (Err(why), _) | (_, Err(why)) => {
                sink.reading.note("ratelimit", value, why);
                continue;
            }
        };
        let policy = policies.iter().find(|p| p.name.as_deref() == Some(&name));
        sink.push(
            QuotaState {
                name: limit_name(&name),
                kind: policy.map_or(LimitKind::Requests, |p| p.kind),
                remaining,
                reset: Duration::from_secs(reset),
                quota: policy.and_then(|p| p.quota),
                window: policy.and_then(|p| p.window),
            },
            "ratelimit",
            value,
        );
    }
}

/// The older dictionary: `limit=L, remaining=R, reset=T`.
fn older_dictionary(dictionary: &Dictionary, value: &[u8], sink: &mut Sink) {
    let member = |key: &str| -> Result<u64, QuotaIgnored> {
        match dictionary.get(key) {
            Some(ListEntry::Item(item)) => non_negative(&item.bare_item),
            Some(ListEntry::InnerList(_)) => Err(QuotaIgnored::Malformed),
            None => Err(QuotaIgnored::Unpaired),
        }
    };
    let (remaining, reset) = match (member("remaining"), member("reset")) {
        (Ok(r), Ok(t)) => (r, t),
        (Err(why), _) | (_, Err(why)) => {
            return sink.reading.note("ratelimit", value, why);
        }
    };
    sink.push(
        QuotaState {
            name: UNNAMED.to_owned(),
            kind: LimitKind::Requests,
            remaining,
            reset: Duration::from_secs(reset),
            quota: member("limit").ok(),
            window: None,
        },
        "ratelimit",
        value,
    );
}

/// A policy's name: a string or a token.
fn name_of(item: &BareItem) -> Option<String> {
    match item {
        BareItem::String(s) => Some(s.as_str().to_owned()),
        BareItem::Token(t) => Some(t.as_str().to_owned()),
        _ => None,
    }
}

/// A non-negative integer parameter, or `None`.
fn param(params: &Parameters, key: &str) -> Option<u64> {
    params.get(key).and_then(|v| non_negative(v).ok())
}

/// A required integer parameter.
fn signed(params: &Parameters, key: &str) -> Result<u64, QuotaIgnored> {
    params
        .get(key)
        .ok_or(QuotaIgnored::Unpaired)
        .and_then(non_negative)
}

fn non_negative(item: &BareItem) -> Result<u64, QuotaIgnored> {
    let n = item.as_integer().ok_or(QuotaIgnored::Malformed)?;
    match i64::from(n) {
        -1 => Err(QuotaIgnored::Unknown),
        n => u64::try_from(n).map_err(|_| QuotaIgnored::Negative),
    }
}
