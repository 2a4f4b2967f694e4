//! The quota reader: one response's headers in, its limits out.

use std::time::{Duration, SystemTime};

use crate::reset::ResetFormat;

use super::fields::Fields;
use super::state::{limit_name, LimitKind, QuotaIgnored, QuotaReading, QuotaState, MAX_LIMITS};
use super::values::{count, reset};
use super::{ietf, vendor};

/// The default [maximum hold](QuotaReader::max_hold).
pub const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(60);

/// Reads the quota state of one response (any status): see the
/// [module documentation](super) for the fields read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaReader {
    max_hold: Duration,
    x_reset: Option<ResetFormat>,
    pairs: Vec<NamedPair>,
}

/// An operator-named pair of headers: remaining and reset.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NamedPair {
    name: String,
    remaining: String,
    reset: String,
    format: ResetFormat,
    kind: LimitKind,
}

impl Default for QuotaReader {
    fn default() -> Self {
        Self::new()
    }
}

impl QuotaReader {
    /// Every known field, resets held at most [`DEFAULT_MAX_HOLD`],
    /// `X-RateLimit-Reset` read by its size (see
    /// [`x_ratelimit_reset`](Self::x_ratelimit_reset)).
    pub fn new() -> Self {
        Self {
            max_hold: DEFAULT_MAX_HOLD,
            x_reset: None,
            pairs: Vec::new(),
        }
    }

    /// A reset further than `max_hold` is clamped to it (and noted as
    /// [`QuotaIgnored::ResetClamped`]).
    #[must_use]
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = max_hold;
        self
    }

    /// The configured maximum hold.
    pub const fn hold_limit(&self) -> Duration {
        self.max_hold
    }

    /// How `X-RateLimit-Reset` (and `RateLimit-Reset`) is read:
    /// [`ResetFormat::Seconds`], [`ResetFormat::Unix`] (GitHub,
    /// flask-limiter), or `None` (the default): a value of at least
    /// [`UNIX_TIME_FROM`](super::UNIX_TIME_FROM) is a Unix time, a smaller
    /// one delta seconds.
    #[must_use]
    pub fn x_ratelimit_reset(mut self, format: Option<ResetFormat>) -> Self {
        self.x_reset = format;
        self
    }

    /// Also reads an operator-named pair: `remaining` (a count) and `reset`
    /// (in `format`), as the limit `name` of `kind`.
    #[must_use]
    pub fn pair(
        mut self,
        name: &str,
        remaining: &str,
        reset: &str,
        format: ResetFormat,
        kind: LimitKind,
    ) -> Self {
        self.pairs.push(NamedPair {
            name: limit_name(name),
            remaining: remaining.to_owned(),
            reset: reset.to_owned(),
            format,
            kind,
        });
        self
    }

    /// The limits one response announces. `headers` are its (name, value)
    /// lines; `calendar` is the trusted calendar reading at receipt (needed
    /// by Unix and RFC 3339 resets, which are set aside without it).
    ///
    /// A response with `Age` is not read. `Retry-After` is never read
    /// here: on a 2xx it is no hold (flask-limiter sends one on every
    /// response), and a 429's is the action's.
    pub fn read<'a>(
        &self,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        calendar: Option<SystemTime>,
    ) -> QuotaReading {
        // Only the lines a format could look up are kept: most heads
        // carry none, and are then read in one pass over their names.
        let fields = Fields::new(headers.into_iter().filter(|(name, _)| self.knows(name)));
        if fields.is_empty() {
            return QuotaReading::default();
        }
        let mut sink = Sink {
            reading: QuotaReading::default(),
            calendar,
            max_hold: self.max_hold,
        };
        if let Some(age) = fields.single("age", &mut sink.reading) {
            sink.reading.notes.clear();
            sink.reading.note("age", age, QuotaIgnored::Cached);
            return sink.reading;
        }
        ietf::read(&fields, self.x_reset, &mut sink);
        vendor::read(&fields, self.x_reset, &mut sink);
        for pair in &self.pairs {
            sink.pair(
                &fields,
                &pair.name,
                pair.kind,
                [&pair.remaining, &pair.reset, ""],
                Some(pair.format),
            );
        }
        sink.reading
    }

    /// Whether `name` (any case) may be a field some format reads: it
    /// starts as one of the built-in formats' names or is an operator
    /// pair's. A head with no such name announces nothing: a caller may
    /// look at its names alone before [`read`](Self::read)ing it.
    /// Hand-written: a prefix test, not worth a crate.
    #[inline]
    pub fn knows(&self, name: &str) -> bool {
        // The first byte tells most names apart from every prefix.
        let may_start = name
            .as_bytes()
            .first()
            .is_some_and(|first| STARTS[usize::from(first.to_ascii_lowercase())]);
        (may_start || !self.pairs.is_empty()) && self.compares(name, may_start)
    }

    /// [`knows`](Self::knows), once the first byte (`may_start`) is read.
    fn compares(&self, name: &str, may_start: bool) -> bool {
        let name_bytes = name.as_bytes();
        (may_start
            && KNOWN_PREFIXES.iter().any(|prefix| {
                name_bytes
                    .get(..prefix.len())
                    .is_some_and(|start| start.eq_ignore_ascii_case(prefix.as_bytes()))
            }))
            || self.pairs.iter().any(|pair| {
                name.eq_ignore_ascii_case(&pair.remaining) || name.eq_ignore_ascii_case(&pair.reset)
            })
    }
}

/// What every field name the built-in formats read starts with: `Age`,
/// the IETF fields (`ietf.rs`) and the vendors' (`vendor.rs`). A name
/// added there must start with one of these, in lower case.
const KNOWN_PREFIXES: [&str; 4] = ["age", "ratelimit", "x-ratelimit-", "anthropic-ratelimit-"];

/// Which bytes (lower-case) a known prefix starts with.
const STARTS: [bool; 256] = {
    let mut starts = [false; 256];
    let mut i = 0;
    while i < KNOWN_PREFIXES.len() {
        starts[KNOWN_PREFIXES[i].as_bytes()[0] as usize] = true;
        i = i.saturating_add(1);
    }
    starts
};

/// Where the formats' readers put what they found.
pub(crate) struct Sink {
    pub(crate) reading: QuotaReading,
    pub(crate) calendar: Option<SystemTime>,
    max_hold: Duration,
}

impl Sink {
    /// Adds a state whose reset (from receipt) is `reset`, clamped to the
    /// maximum hold; `header` and `raw` name the reset's field for the note.
    pub(crate) fn push(&mut self, mut state: QuotaState, header: &str, raw: &[u8]) {
        if self.reading.states.len() >= MAX_LIMITS {
            self.reading.note(header, raw, QuotaIgnored::TooMany);
            return;
        }
        if state.reset > self.max_hold {
            self.reading.note(header, raw, QuotaIgnored::ResetClamped);
            state.reset = self.max_hold;
        }
        self.reading.states.push(state);
    }

    /// A pair of separate fields `[remaining, reset, limit]` (`limit`
    /// empty: none) naming the limit `name`.
    pub(crate) fn pair(
        &mut self,
        fields: &Fields<'_>,
        name: &str,
        kind: LimitKind,
        [remaining_name, reset_name, limit_name_field]: [&str; 3],
        format: Option<ResetFormat>,
    ) {
        let remaining = fields.single(remaining_name, &mut self.reading);
        let reset_raw = fields.single(reset_name, &mut self.reading);
        let (remaining_raw, reset_raw) = match (remaining, reset_raw) {
            (Some(r), Some(t)) => (r, t),
            (Some(raw), None) => {
                // A `-1` is worth saying as such (Azure's unknown).
                let why = count(raw).err().unwrap_or(QuotaIgnored::Unpaired);
                self.reading.note(remaining_name, raw, why);
                return;
            }
            (None, Some(raw)) => {
                self.reading.note(reset_name, raw, QuotaIgnored::Unpaired);
                return;
            }
            (None, None) => return,
        };
        let remaining = match count(remaining_raw) {
            Ok(n) => n,
            Err(why) => return self.reading.note(remaining_name, remaining_raw, why),
        };
        let wait = match reset(reset_raw, format, self.calendar) {
            Ok(wait) => wait,
            Err(why) => return self.reading.note(reset_name, reset_raw, why),
        };
        let quota = if limit_name_field.is_empty() {
            None
        } else {
            fields
                .single(limit_name_field, &mut self.reading)
                .and_then(|raw| match count(raw) {
                    Ok(n) => Some(n),
                    Err(why) => {
                        self.reading.note(limit_name_field, raw, why);
                        None
                    }
                })
        };
        self.push(
            QuotaState {
                name: limit_name(name),
                kind,
                remaining,
                reset: wait,
                quota,
                window: None,
            },
            reset_name,
            reset_raw,
        );
    }
}
