//! The set of retried statuses: a fixed-size bitset over 400..=599, so that a
//! [`Policy`](crate::Policy) stays `Copy`.

use std::fmt;

const FIRST: u16 = 400;
const LAST: u16 = 599;

/// A set of HTTP error statuses (4xx and 5xx).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusSet([u64; 4]);

impl StatusSet {
    /// The empty set.
    pub const EMPTY: Self = Self([0; 4]);
    /// `{429}`: the default.
    pub const TOO_MANY_REQUESTS: Self = match Self::EMPTY.with(429) {
        Some(set) => set,
        None => Self::EMPTY,
    };

    /// This set with `status` added, or `None` if `status` is not 4xx or 5xx.
    pub const fn with(mut self, status: u16) -> Option<Self> {
        if status < FIRST || status > LAST {
            return None;
        }
        let bit = (status - FIRST) as usize;
        self.0[bit / 64] |= 1 << (bit % 64);
        Some(self)
    }

    /// Whether `status` is in the set.
    #[inline]
    pub const fn contains(&self, status: u16) -> bool {
        if status < FIRST || status > LAST {
            return false;
        }
        let bit = (status - FIRST) as usize;
        self.0[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(&self) -> bool {
        self.0[0] == 0 && self.0[1] == 0 && self.0[2] == 0 && self.0[3] == 0
    }

    /// The statuses in the set, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (FIRST..=LAST).filter(|s| self.contains(*s))
    }
}

impl fmt::Debug for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership() {
        let set = StatusSet::EMPTY.with(503).unwrap().with(429).unwrap();
        assert!(set.contains(429) && set.contains(503));
        assert!(!set.contains(500) && !set.contains(200) && !set.contains(65535));
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![429, 503]);
        assert!(StatusSet::EMPTY.with(399).is_none());
        assert!(StatusSet::EMPTY.with(600).is_none());
        assert_eq!(format!("{:?}", StatusSet::TOO_MANY_REQUESTS), "{429}");
    }
}
