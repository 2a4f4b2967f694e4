//! Several extras of one action as one part of it ([`Many`]), in one
//! allocation sized for them.

use std::task::{Context, Poll};
use std::time::SystemTime;

use http::{Extensions, HeaderMap};
use retry_budget::trail::Event;
use retry_budget::{Action, Answer, ClientEffects, Report};

use super::{ActionExtra, BeforeFirst, Moments, Paced};
use crate::clock::Clock;

/// `parts` (at most `room` of them) as one [`Many`], each with the moments
/// `hear` says it acts on: one allocation with room for 4 or 8 parts, or a
/// list beyond that.
pub(super) fn of(
    room: usize,
    parts: impl Iterator<Item = Box<dyn ActionExtra>>,
    mut hear: impl FnMut(&dyn ActionExtra) -> Moments,
) -> Box<dyn ActionExtra> {
    match room {
        ..=4 => in_room::<4>(parts, hear),
        5..=8 => in_room::<8>(parts, hear),
        _ => {
            let listed = parts.map(|part| (hear(&*part), part));
            Box::new(Many(listed.collect::<Vec<Slot>>()))
        }
    }
}

/// `parts` (at most `N`) as one [`Many`] with room for `N`.
fn in_room<const N: usize>(
    parts: impl Iterator<Item = Box<dyn ActionExtra>>,
    mut hear: impl FnMut(&dyn ActionExtra) -> Moments,
) -> Box<dyn ActionExtra> {
    let mut many = Box::new(Many(Room::<N> {
        slots: std::array::from_fn(|_| idle()),
        len: 0,
    }));
    let room = &mut many.0;
    for (slot, part) in room.slots.iter_mut().zip(parts) {
        *slot = (hear(&*part), part);
        room.len = room.len.saturating_add(1);
    }
    many
}

/// One part of an action in a [`Many`], with the moments it acts on.
type Slot = (Moments, Box<dyn ActionExtra>);

/// What a [`Room`]'s slots hold until a part is put there: zero-sized (its
/// box allocates nothing), acting on no moment, and never asked (only the
/// parts made are).
struct Idle;

/// A slot with nothing in it yet.
fn idle() -> Slot {
    (Moments::NONE, Box::new(Idle))
}

impl ActionExtra for Idle {
    fn moments(&self) -> Moments {
        Moments::NONE
    }
}

/// Room for `N` parts, the first `len` made (never more than `N`): only
/// those are looked at.
struct Room<const N: usize> {
    slots: [Slot; N],
    len: usize,
}

impl<const N: usize> AsRef<[Slot]> for Room<N> {
    fn as_ref(&self) -> &[Slot] {
        &self.slots[..self.len.min(N)]
    }
}

impl<const N: usize> AsMut<[Slot]> for Room<N> {
    fn as_mut(&mut self) -> &mut [Slot] {
        let len = self.len.min(N);
        &mut self.slots[..len]
    }
}

/// Several extras of one action, each with the moments it acts on, told
/// each of those in order. Its slots are an array sized for the extras
/// asked (one allocation with the `Many`), or a list if there are many.
struct Many<P>(P);

impl<P: AsRef<[Slot]> + AsMut<[Slot]>> Many<P> {
    /// The parts that act on `moment`, in order.
    fn acting(&mut self, moment: Moments) -> impl Iterator<Item = &mut Box<dyn ActionExtra>> {
        self.0
            .as_mut()
            .iter_mut()
            .filter(move |(moments, _)| moments.has(moment))
            .map(|(_, part)| part)
    }

    /// Every part, in order.
    fn parts(&self) -> impl Iterator<Item = &dyn ActionExtra> {
        self.0.as_ref().iter().map(|(_, part)| &**part)
    }
}

impl<P> ActionExtra for Many<P>
where
    P: AsRef<[Slot]> + AsMut<[Slot]> + Send + Sync,
{
    fn moments(&self) -> Moments {
        self.0
            .as_ref()
            .iter()
            .fold(Moments::NONE, |all, (moments, _)| all.and(*moments))
    }

    /// Any store down; the latest hold; the latest pace.
    fn before_first(&mut self, clock: &mut Clock) -> BeforeFirst {
        let mut before = BeforeFirst::default();
        for part in self.acting(Moments::BEFORE_FIRST) {
            let said = part.before_first(clock);
            before.store_down |= said.store_down;
            before.held_until = before.held_until.max(said.held_until);
            before.asks |= said.asks;
            before.quota_held = before.quota_held.max(said.quota_held);
            if let Some((until, reason)) = said.paced {
                if before.paced.as_ref().is_none_or(|(held, _)| until > *held) {
                    before.paced = Some((until, reason));
                }
            }
        }
        before
    }

    /// Every part asked (each registers its waker); the latest pace.
    fn poll_first(&mut self, cx: &mut Context<'_>, clock: &mut Clock) -> Poll<Paced> {
        let mut pending = false;
        let mut paced: Paced = None;
        // A part asks only if its `before_first` said so.
        for part in self.acting(Moments::BEFORE_FIRST) {
            match part.poll_first(cx, clock) {
                Poll::Pending => pending = true,
                Poll::Ready(Some((until, reason))) => {
                    if paced.as_ref().is_none_or(|(held, _)| until > *held) {
                        paced = Some((until, reason));
                    }
                }
                Poll::Ready(None) => {}
            }
        }
        match paced {
            Some(paced) => Poll::Ready(Some(paced)),
            None if pending => Poll::Pending,
            None => Poll::Ready(None),
        }
    }

    fn listens(&self) -> bool {
        self.parts().any(|part| part.listens())
    }

    fn event(&mut self, event: &Event) {
        for part in self.acting(Moments::EVENT) {
            part.event(event);
        }
    }

    fn shares(&self) -> bool {
        self.parts().any(|part| part.shares())
    }

    fn effects(&mut self, effects: &ClientEffects, clock: &mut Clock) {
        for part in self.acting(Moments::EFFECTS) {
            part.effects(effects, clock);
        }
    }

    fn attempt(&mut self, extensions: &mut Extensions, action: &Action, clock: &mut Clock) {
        for part in self.acting(Moments::ATTEMPT) {
            part.attempt(extensions, action, clock);
        }
    }

    fn head(&mut self, headers: &HeaderMap, calendar: &mut dyn FnMut() -> Option<SystemTime>) {
        for part in self.acting(Moments::HEAD) {
            part.head(headers, calendar);
        }
    }

    fn answer(&mut self, answer: &mut Answer<'_>) {
        for part in self.acting(Moments::ANSWER) {
            part.answer(answer);
        }
    }

    fn cancelled(&mut self, cx: &mut Context<'_>) -> bool {
        self.acting(Moments::CANCELLED)
            .any(|part| part.cancelled(cx))
    }

    fn wants_report(&self) -> bool {
        self.parts().any(|part| part.wants_report())
    }

    fn report(&mut self, report: &Report, clock: &mut Clock) {
        for part in self.acting(Moments::REPORT) {
            part.report(report, clock);
        }
    }

    fn deliver(&mut self, extensions: &mut Extensions, report: &Report, clock: &mut Clock) {
        for part in self.acting(Moments::DELIVER) {
            part.deliver(extensions, report, clock);
        }
    }
}
