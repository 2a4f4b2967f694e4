//! The fleet's part of [`Pacing`](super::Pacing): before a first attempt
//! is sent, one take from the fleet's count of each window its pacer names
//! ([`Pacer::fleet_windows`](retry_budget::pace::Pacer::fleet_windows)), on
//! a [`RedisAllowance`]. A window the fleet has spent goes back to the
//! pacer ([`Pacer::fleet_spent`](retry_budget::pace::Pacer::fleet_spent)),
//! which decides again; Redis unreachable, the process paces alone (fail
//! open): never a request refused because Redis is down.
#![deny(clippy::arithmetic_side_effects)] // time goes through `clock.rs`, saturating

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Duration;

use retry_budget::pace::FleetWindow;
use tokio::task::JoinHandle;

use crate::clock::unix_ms_after;
use crate::hold_off::{RedisAllowance, Take};

/// A window the fleet has spent: the limit, and how long it lasts yet.
pub(super) type Spent = Option<(String, Duration)>;

/// Where one action's ask of the fleet is.
#[derive(Debug, Default)]
pub(super) enum Asking {
    /// Not asked (or asked again after a wait).
    #[default]
    Idle,
    /// The takes are under way, on a task of their own (so that the action
    /// stays `Sync`; each take is bounded by the store's operation bound).
    Taking(JoinHandle<Spent>),
    /// The fleet has answered that the first attempt may go.
    Cleared,
}

impl Asking {
    /// Starts the takes for `windows` of upstream `key`, seen at `now`
    /// (elapsed): each window's end is sent as calendar time.
    pub(super) fn start(
        &mut self,
        allowance: &RedisAllowance,
        key: &str,
        now: Duration,
        windows: Vec<FleetWindow>,
    ) {
        let takes: Vec<(String, String, u64, u64)> = windows
            .into_iter()
            .map(|w| {
                let end = unix_ms_after(w.resets_at.saturating_sub(now));
                (format!("{key} {}", w.limit), w.limit, end, w.announced)
            })
            .collect();
        let allowance = allowance.clone();
        *self = Self::Taking(tokio::spawn(async move {
            for (store_key, limit, end, announced) in takes {
                match allowance.take(&store_key, end, announced).await {
                    Ok(Take::Refused { window_left }) => return Some((limit, window_left)),
                    // Granted, or already over on the fleet's clock: the
                    // next window.
                    Ok(_) => {}
                    // Redis unreachable: this process paces alone.
                    Err(_) => return None,
                }
            }
            None
        }));
    }

    /// The fleet's answer, once there is one: `Ready(Some)` a window it
    /// has spent (asked again after the wait), `Ready(None)` go.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Spent> {
        let Self::Taking(task) = self else {
            return Poll::Ready(None);
        };
        let spent = match std::pin::Pin::new(task).poll(cx) {
            Poll::Pending => return Poll::Pending,
            // A task that panicked or was cancelled: pace alone.
            Poll::Ready(answer) => answer.ok().flatten(),
        };
        *self = if spent.is_some() {
            Self::Idle
        } else {
            Self::Cleared
        };
        Poll::Ready(spent)
    }
}

impl Drop for Asking {
    /// The action left while asking: the take's task stops with it.
    fn drop(&mut self) {
        if let Self::Taking(task) = self {
            task.abort();
        }
    }
}
