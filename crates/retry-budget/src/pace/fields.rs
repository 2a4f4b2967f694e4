//! One response's header lines, looked up by name.

use super::state::{QuotaIgnored, QuotaReading};

/// The lines of one response, in order (names compared without case).
pub(crate) struct Fields<'a> {
    lines: Vec<(&'a str, &'a [u8])>,
}

impl<'a> Fields<'a> {
    pub(crate) fn new(lines: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Self {
        Self {
            lines: lines.into_iter().collect(),
        }
    }

    /// Whether there is no line at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// A field that holds one value: its first line; any further line is
    /// noted as [`QuotaIgnored::Repeated`].
    pub(crate) fn single(&self, name: &str, reading: &mut QuotaReading) -> Option<&'a [u8]> {
        let mut lines = self
            .lines
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v);
        let first = lines.next()?;
        for repeated in lines {
            reading.note(name, repeated, QuotaIgnored::Repeated);
        }
        Some(first)
    }

    /// A list field: its lines joined with `, ` (RFC 9110 §5.3), or `None`
    /// when absent.
    pub(crate) fn list(&self, name: &str) -> Option<Vec<u8>> {
        let mut joined: Option<Vec<u8>> = None;
        for (_, value) in self
            .lines
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        {
            match joined.as_mut() {
                Some(joined) => {
                    joined.extend_from_slice(b", ");
                    joined.extend_from_slice(value);
                }
                None => joined = Some(value.to_vec()),
            }
        }
        joined
    }
}
