//! The bounded map itself, pure: every method takes `now`, so that it can be
//! driven by a property test without a clock.
//!
//! # Why two structures
//!
//! A lookup by authority needs a hash map; eviction needs the entry that
//! expires soonest (it is the least worth keeping: it stops holding anything
//! first, and expired ones hold nothing at all). A `BTreeSet` of
//! `(until, key)` next to the `HashMap` gives both in O(log n): the soonest
//! is its first element, and an entry whose hold is lengthened is removed and
//! re-inserted. A `BinaryHeap` cannot remove or update an arbitrary entry
//! (lazy deletion would let stale entries pile up with every lengthened
//! hold), and an LRU order is the wrong order: a recently *used* authority
//! whose hold is about to end is worth less than an old one held for ten
//! more minutes. Keys are shared (`Arc<str>`) between the two structures,
//! so each authority is stored once.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use tokio::time::Instant;

/// Authorities and the instant until which each is held off, at most
/// `capacity` of them.
pub(super) struct Map {
    until: HashMap<Arc<str>, Instant>,
    by_expiry: BTreeSet<(Instant, Arc<str>)>,
    capacity: usize,
    /// Entries touched by purging and eviction since creation: what a
    /// structural test reads to bound the work of one operation.
    #[cfg(test)]
    pub(super) visited: usize,
}

/// What [`Map::hold`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// The authority was not held, or held for less: it is now held until
    /// the given instant.
    Lengthened,
    /// A hold at least as long was already known; nothing changed.
    AlreadyLonger,
    /// The instant is not in the future; nothing changed.
    Past,
    /// The map is full of longer holds: this one was not kept.
    NoRoom,
}

impl Map {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            until: HashMap::new(),
            by_expiry: BTreeSet::new(),
            capacity,
            #[cfg(test)]
            visited: 0,
        }
    }

    /// The instant until which `key` is held off, if that is after `now`.
    pub(super) fn until(&mut self, now: Instant, key: &str) -> Option<Instant> {
        self.purge(now);
        self.until.get(key).copied()
    }

    /// Holds `key` until `until`, keeping the later of this and any hold
    /// already known.
    pub(super) fn hold(&mut self, now: Instant, key: &str, until: Instant) -> Held {
        if until <= now {
            return Held::Past;
        }
        self.purge(now);
        if let Some((key, known)) = self.until.get_key_value(key) {
            if *known >= until {
                return Held::AlreadyLonger;
            }
            let key = key.clone();
            self.by_expiry.remove(&(*known, key.clone()));
            self.by_expiry.insert((until, key.clone()));
            self.until.insert(key, until);
            return Held::Lengthened;
        }
        if self.until.len() >= self.capacity {
            // Full of live holds: forget the one that ends soonest, if it
            // ends before this one.
            match self.by_expiry.first() {
                Some((soonest, _)) if *soonest >= until => return Held::NoRoom,
                _ => self.evict_first(),
            }
        }
        let key: Arc<str> = Arc::from(key);
        self.by_expiry.insert((until, key.clone()));
        self.until.insert(key, until);
        Held::Lengthened
    }

    /// Every live hold (O(n): for a store that reconnects, not for
    /// requests).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(super) fn live(&mut self, now: Instant) -> Vec<(Arc<str>, Instant)> {
        self.purge(now);
        self.by_expiry
            .iter()
            .map(|(until, key)| (key.clone(), *until))
            .collect()
    }

    /// Authorities in the map.
    pub(super) fn len(&self) -> usize {
        self.until.len()
    }

    /// Drops every hold that ended at or before `now`: each entry is
    /// dropped once, so this costs O(log n) per entry over its life.
    fn purge(&mut self, now: Instant) {
        while self
            .by_expiry
            .first()
            .is_some_and(|(until, _)| *until <= now)
        {
            self.evict_first();
        }
    }

    fn evict_first(&mut self) {
        if let Some((_, key)) = self.by_expiry.pop_first() {
            self.until.remove(&key);
            #[cfg(test)]
            {
                self.visited += 1;
            }
        }
    }

    /// The two structures agree (for tests).
    #[cfg(test)]
    pub(super) fn check(&self) {
        assert_eq!(self.until.len(), self.by_expiry.len());
        assert!(self.until.len() <= self.capacity);
        for (until, key) in &self.by_expiry {
            assert_eq!(self.until.get(key), Some(until));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    use proptest::prelude::*;

    fn at(base: Instant, ms: u64) -> Instant {
        crate::clock::instant_at(base, Duration::from_millis(ms)).expect("test instants are near")
    }

    #[test]
    fn eviction_takes_the_soonest_and_touches_one_entry() {
        let base = Instant::now();
        let n = 100_000;
        let mut map = Map::new(n);
        for i in 0..n {
            // Distinct, shuffled expiries (7919 is prime, coprime with n).
            let ms = 1_000 + (i * 7919) % n;
            map.hold(base, &format!("http://h{i}:80"), at(base, ms as u64));
        }
        assert_eq!(map.len(), n);
        let before = map.visited;
        // A full map of live holds: one insert evicts exactly one entry, the
        // soonest, whatever the size of the map.
        assert_eq!(
            map.hold(base, "http://new:80", at(base, 5_000_000)),
            Held::Lengthened
        );
        assert_eq!(map.visited - before, 1, "one entry touched, not a scan");
        assert_eq!(map.len(), n);
        // The soonest was the key whose expiry was 1_000 ms: i == 0.
        assert_eq!(map.until(base, "http://h0:80"), None);
        assert!(map.until(base, "http://h1:80").is_some());
        // A hold shorter than every hold known is not worth a place.
        let before = map.visited;
        assert_eq!(map.hold(base, "http://short:80", at(base, 1)), Held::NoRoom);
        assert_eq!(map.visited, before);
        map.check();
    }

    #[test]
    fn expired_entries_go_first_and_each_only_once() {
        let base = Instant::now();
        let mut map = Map::new(4);
        for (i, ms) in [10, 20, 30, 40].into_iter().enumerate() {
            map.hold(base, &format!("k{i}"), at(base, ms));
        }
        let later = at(base, 25);
        assert_eq!(map.until(later, "k3"), Some(at(base, 40)));
        assert_eq!(map.visited, 2, "the two expired entries, once each");
        assert_eq!(map.len(), 2);
        map.until(later, "k3");
        assert_eq!(map.visited, 2);
        map.check();
    }

    #[derive(Debug, Clone)]
    enum Op {
        Hold { key: u8, ms: u16 },
        Until { key: u8 },
        Advance { ms: u16 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12, 0u16..2_000).prop_map(|(key, ms)| Op::Hold { key, ms }),
            (0u8..12).prop_map(|key| Op::Until { key }),
            (0u16..500).prop_map(|ms| Op::Advance { ms }),
        ]
    }

    /// The obvious O(n) map: the reference the fast one must agree with.
    struct Naive {
        until: HashMap<String, Instant>,
        capacity: usize,
    }

    impl Naive {
        fn hold(&mut self, now: Instant, key: &str, until: Instant) {
            if until <= now {
                return;
            }
            self.until.retain(|_, u| *u > now);
            if let Some(known) = self.until.get_mut(key) {
                *known = (*known).max(until);
                return;
            }
            if self.until.len() >= self.capacity {
                let soonest = self
                    .until
                    .iter()
                    .map(|(k, u)| (*u, k.clone()))
                    .min()
                    .expect("full");
                if soonest.0 >= until {
                    return;
                }
                self.until.remove(&soonest.1);
            }
            self.until.insert(key.to_owned(), until);
        }

        fn until(&self, now: Instant, key: &str) -> Option<Instant> {
            self.until.get(key).copied().filter(|u| *u > now)
        }
    }

    proptest! {
        #[test]
        fn agrees_with_the_naive_map(capacity in 1usize..6, ops in proptest::collection::vec(op(), 1..200)) {
            let base = Instant::now();
            let mut now_ms = 0u64;
            let mut fast = Map::new(capacity);
            let mut naive = Naive { until: HashMap::new(), capacity };
            for op in ops {
                let now = at(base, now_ms);
                match op {
                    Op::Hold { key, ms } => {
                        let key = format!("k{key}");
                        let until = at(base, now_ms + u64::from(ms));
                        fast.hold(now, &key, until);
                        naive.hold(now, &key, until);
                    }
                    Op::Until { key } => {
                        let key = format!("k{key}");
                        prop_assert_eq!(fast.until(now, &key), naive.until(now, &key));
                    }
                    Op::Advance { ms } => now_ms += u64::from(ms),
                }
                fast.check();
            }
            let now = at(base, now_ms);
            for key in 0..12 {
                let key = format!("k{key}");
                prop_assert_eq!(fast.until(now, &key), naive.until(now, &key));
            }
        }
    }
}
