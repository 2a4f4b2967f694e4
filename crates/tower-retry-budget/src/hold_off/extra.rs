//! The [`HoldOff`] map as an extra of the retry layer: a first attempt
//! waits for a hold-off another action published, and a service's delay is
//! published for the others.
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::sync::Arc;

use http::request::Parts;
use retry_budget::ClientEffects;

use super::authority::authority_in;
use super::HoldOff;
use crate::clock::Clock;
use crate::extra::{ActionExtra, BeforeFirst, Extra, Moments};

impl Extra for HoldOff {
    type Part = Keyed;

    fn start(&self, request: Option<&mut Parts>) -> Option<Keyed> {
        let request = request?;
        let key = authority_in(&request.uri, &request.headers)?;
        Some(Keyed {
            map: self.clone(),
            key,
        })
    }
}

/// The code a request held by another's used-up quota is given.
const QUOTA_HELD: &str = "quota_held";

/// The client's hold-off map and one request's key in it.
pub(crate) struct Keyed {
    map: HoldOff,
    key: Arc<str>,
}

impl ActionExtra for Keyed {
    const MOMENTS: Moments = Moments::BEFORE_FIRST.and(Moments::EFFECTS);

    /// A shared store (Redis) that is down: the core records that this
    /// action's hold-offs come from the local map alone. A hold on the
    /// request's service: the core decides whether the first attempt waits
    /// or is never sent.
    fn before_first(&mut self, clock: &mut Clock) -> BeforeFirst {
        BeforeFirst {
            store_down: self
                .map
                .store_health()
                .is_some_and(|health| !health.available),
            held_until: self.map.until(&self.key).map(|until| clock.since(until)),
            quota_held: self
                .map
                .quota_until(&self.key)
                .map(|until| (clock.since(until), QUOTA_HELD)),
            ..BeforeFirst::default()
        }
    }

    fn shares(&self) -> bool {
        true
    }

    fn effects(&mut self, effects: &ClientEffects, clock: &mut Clock) {
        if let Some(until) = effects.hold_until {
            self.map.hold(&self.key, clock.at_or_far(until));
        }
        if let Some(until) = effects.quota_hold_until {
            self.map.hold_quota(&self.key, clock.at_or_far(until));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parts(uri: &str) -> Parts {
        http::Request::get(uri).body(()).unwrap().into_parts().0
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_to_a_held_service_waits_and_a_delay_is_published() {
        let map = HoldOff::new(8).unwrap();
        assert!(map.start(Some(&mut parts("/relative"))).is_none(), "no key");
        assert!(map.start(None).is_none());

        let mut clock = Clock::start();
        let mut keyed = map.start(Some(&mut parts("http://a.test/x"))).unwrap();
        assert!(keyed.shares());
        assert_eq!(keyed.before_first(&mut clock).held_until, None);

        let mut effects = ClientEffects::default();
        effects.hold_until = Some(Duration::from_secs(5));
        keyed.effects(&effects, &mut clock);
        let mut other = map.start(Some(&mut parts("http://A.test:80/y"))).unwrap();
        let before = other.before_first(&mut clock);
        assert_eq!(before.held_until, Some(Duration::from_secs(5)));
        assert!(!before.store_down);
        assert_eq!(before.quota_held, None);

        // A used-up quota: held for the others, apart from the delays.
        let mut effects = ClientEffects::default();
        effects.quota_hold_until = Some(Duration::from_secs(10));
        keyed.effects(&effects, &mut clock);
        let before = other.before_first(&mut clock);
        assert_eq!(before.held_until, Some(Duration::from_secs(5)));
        assert_eq!(
            before.quota_held,
            Some((Duration::from_secs(10), QUOTA_HELD))
        );
        let mut elsewhere = map.start(Some(&mut parts("http://b.test/y"))).unwrap();
        assert_eq!(elsewhere.before_first(&mut clock).quota_held, None);
    }
}
