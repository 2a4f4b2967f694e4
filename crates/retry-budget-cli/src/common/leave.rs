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

use crate::common::exit::Exit;

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

/// The stop signals, listened for from the moment [`LeaveListener::listen`]
/// returns: SIGINT, SIGTERM and SIGHUP on Unix, Ctrl-C elsewhere. The one
/// place the CLI handles OS signals: `get` and `replay` through [`watch`],
/// the proxy (which drains before it cancels) through [`LeaveListener::recv`].
#[derive(Debug)]
pub struct LeaveListener {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
}

impl LeaveListener {
    /// Installs the handlers. Must be called inside the runtime.
    ///
    /// # Errors
    ///
    /// A signal handler could not be installed.
    pub fn listen() -> io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
                hangup: signal(SignalKind::hangup())?,
            })
        }
        #[cfg(not(unix))]
        Ok(Self {})
    }

    /// The next stop signal; `None` if none can arrive any more.
    pub async fn recv(&mut self) -> Option<Leave> {
        #[cfg(unix)]
        {
            tokio::select! {
                Some(()) = self.interrupt.recv() => Some(Leave::Interrupt),
                Some(()) = self.terminate.recv() => Some(Leave::Terminate),
                Some(()) = self.hangup.recv() => Some(Leave::Hangup),
                else => None,
            }
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c()
            .await
            .ok()
            .map(|()| Leave::Interrupt)
    }
}

/// Fires `cancel` on the first stop signal ([`LeaveListener`]). Must be called
/// inside the runtime.
///
/// # Errors
///
/// A signal handler could not be installed.
pub fn watch(cancel: CancellationToken) -> io::Result<Watcher> {
    let left = Arc::new(OnceLock::new());
    let seen = left.clone();
    let mut signals = LeaveListener::listen()?;
    let task = tokio::spawn(async move {
        if let Some(leave) = signals.recv().await {
            let _ = seen.set(leave);
            cancel.cancel();
        }
    });
    Ok(Watcher { task, left })
}
