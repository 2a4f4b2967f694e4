//! The [`HoldOff`] map as an extra of the retry layer: a first attempt
//! waits for a hold-off another action published, and a service's delay is
//! published for the others.
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use http::request::Parts;
use retry_budget::ClientEffects;

use super::authority::authority_in;
use super::HoldOff;
use crate::clock::Clock;
use crate::extra::{ActionExtra, BeforeFirst, Extra};

impl Extra for HoldOff {
    fn start(&self, request: Option<&mut Parts>) -> Option<Box<dyn ActionExtra>> {
        let request = request?;
        let key = authority_in(&request.uri, &request.headers)?;
        Some(Box::new(Keyed {
            map: self.clone(),
            key,
        }))
    }
}

/// The client's hold-off map and one request's key in it.
struct Keyed {
    map: HoldOff,
    key: String,
}

impl ActionExtra for Keyed {
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
        }
    }

    fn shares(&self) -> bool {
        true
    }

    fn effects(&mut self, effects: &ClientEffects, clock: &mut Clock) {
        if let Some(until) = effects.hold_until {
            self.map.hold(&self.key, clock.at_or_far(until));
        }
    }
}
