//! The user leaving: SIGINT (Ctrl-C), SIGTERM and SIGHUP all mean "stop
//! now", and the command must still say what happened.
//!
//! A [`Watcher`] turns the first of these signals into a fired
//! [`CancellationToken`] (the layer then sends nothing more and returns at
//! once with its report) and remembers which signal it was, for the exit
//! status ([`Leave::exit`]: 130, 143 or 129). Its handlers are in place when
//! [`watch`] returns, before anything is sent.

use std::io;
use std::sync::{Arc, OnceLock};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::exit::Exit;

/// Which signal made the user leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// SIGINT: Ctrl-C.
    Interrupt,
    /// SIGTERM: `kill`, a service manager stopping the command.
    Terminate,
    /// SIGHUP: the terminal went away.
    Hangup,
}

impl Leave {
    /// The exit status: `128 + the signal's number`.
    pub const fn exit(self) -> Exit {
        match self {
            Self::Interrupt => Exit::Interrupt,
            Self::Terminate => Exit::Terminate,
            Self::Hangup => Exit::Hangup,
        }
    }

    /// The signal's name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
            Self::Hangup => "SIGHUP",
        }
    }
}

/// Listens for the signals until dropped.
#[derive(Debug)]
pub struct Watcher {
    task: JoinHandle<()>,
    left: Arc<OnceLock<Leave>>,
}

impl Watcher {
    /// The signal received, if one was.
    pub fn left(&self) -> Option<Leave> {
        self.left.get().copied()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Fires `cancel` on the first SIGINT, SIGTERM or SIGHUP (Ctrl-C only,
/// off Unix). Must be called inside the runtime.
///
/// # Errors
///
/// A signal handler could not be installed.
pub fn watch(cancel: CancellationToken) -> io::Result<Watcher> {
    let left = Arc::new(OnceLock::new());
    let seen = left.clone();
    #[cfg(unix)]
    let task = {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        let mut hangup = signal(SignalKind::hangup())?;
        tokio::spawn(async move {
            let leave = tokio::select! {
                Some(()) = interrupt.recv() => Leave::Interrupt,
                Some(()) = terminate.recv() => Leave::Terminate,
                Some(()) = hangup.recv() => Leave::Hangup,
                else => return,
            };
            let _ = seen.set(leave);
            cancel.cancel();
        })
    };
    #[cfg(not(unix))]
    let task = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = seen.set(Leave::Interrupt);
            cancel.cancel();
        }
    });
    Ok(Watcher { task, left })
}
