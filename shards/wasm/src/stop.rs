//! Stopping an execution from outside: a flag the epoch callback reads every tick, and a
//! waker so that an execution waiting on the host (a `kv_get`, a sleep) is cut off at once.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Waker};

/// Asks a running execution to stop ([`WasmModule::execute_with_stop`]): it ends with
/// [`GuestError::Cancelled`] within about a tick (1 ms), whether it runs wasm code (the epoch
/// callback checks the flag) or waits on the host (the wait is dropped when the execution's
/// task is woken). Stopping an execution that has not started yet makes it end at once;
/// stopping one that ended does nothing. Cheap to clone; `Send + Sync`.
///
/// [`WasmModule::execute_with_stop`]: super::WasmModule::execute_with_stop
/// [`GuestError::Cancelled`]: super::GuestError::Cancelled
#[derive(Clone, Default)]
pub struct StopSignal {
    inner: Arc<StopInner>,
}

#[derive(Default)]
struct StopInner {
    stopped: AtomicBool,
    /// The task of the execution, once it waited.
    waker: Mutex<Option<Waker>>,
}

impl std::fmt::Debug for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopSignal")
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

impl StopSignal {
    /// Sets the flag and wakes the execution if it waits.
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::Release);
        if let Some(waker) = lock(&self.inner.waker).take() {
            waker.wake();
        }
    }

    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::Acquire)
    }

    /// Remembers `cx`'s waker for [`stop`](Self::stop), then says whether the flag is set
    /// (checked after registering, so a stop in between is never missed).
    pub(crate) fn register(&self, cx: &Context<'_>) -> bool {
        {
            let mut waker = lock(&self.inner.waker);
            match waker.as_ref() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *waker = Some(cx.waker().clone()),
            }
        }
        self.is_stopped()
    }
}

/// Locks a mutex, ignoring poisoning (the data guarded here stays consistent: a panic while
/// holding these locks cannot leave them half-updated).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
