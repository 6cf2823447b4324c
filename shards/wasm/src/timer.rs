//! The engine's ticker thread and a coarse (1 ms) timer that needs no async runtime.
//!
//! One thread per [`WasmEngine`](super::WasmEngine): every tick it advances the wasmtime
//! epoch (which drives the per-execution deadline callbacks) and wakes the timers whose
//! deadline has passed. Timers are what bound the time an execution may spend *outside* wasm
//! code (awaiting a `kv_get`, sleeping in `poll_oneoff`), where no epoch check runs. Wakers are
//! called from the ticker thread; the executors we run under (glommio, futures-lite's
//! `block_on`) accept wakes from foreign threads.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::stop::{StopSignal, lock};

/// The tick of the ticker thread: epoch granularity and timer precision.
pub(crate) const TICK: Duration = Duration::from_millis(1);

struct TimerSlot {
    deadline: Instant,
    waker: Mutex<Option<Waker>>,
}

/// Registered timers. Tiny (at most a few per execution slot), so a plain vector.
#[derive(Default)]
pub(crate) struct Timers {
    slots: Mutex<Vec<Arc<TimerSlot>>>,
}

impl Timers {
    /// Wakes (and forgets) every timer whose deadline is `now` or earlier; forgets the timers
    /// whose future was dropped (only the registry still holds them).
    fn fire(&self, now: Instant) {
        let mut due = Vec::new();
        {
            let mut slots = lock(&self.slots);
            if slots.is_empty() {
                return;
            }
            slots.retain(|slot| {
                if Arc::strong_count(slot) == 1 {
                    false
                } else if slot.deadline <= now {
                    due.push(slot.clone());
                    false
                } else {
                    true
                }
            });
        }
        for slot in due {
            if let Some(waker) = lock(&slot.waker).take() {
                waker.wake();
            }
        }
    }

    /// A future that completes at `deadline` (with the ticker's precision, ~1 ms late).
    pub(crate) fn sleep_until(self: &Arc<Self>, deadline: Instant) -> Sleep {
        Sleep {
            timers: self.clone(),
            deadline,
            slot: None,
        }
    }
}

/// See [`Timers::sleep_until`]. Registers itself with the ticker only when first polled
/// before its deadline, so a timer that is never waited on costs nothing.
pub(crate) struct Sleep {
    timers: Arc<Timers>,
    deadline: Instant,
    slot: Option<Arc<TimerSlot>>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        match &self.slot {
            Some(slot) => {
                let mut waker = lock(&slot.waker);
                match waker.as_ref() {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => *waker = Some(cx.waker().clone()),
                }
            }
            None => {
                let slot = Arc::new(TimerSlot {
                    deadline: self.deadline,
                    waker: Mutex::new(Some(cx.waker().clone())),
                });
                lock(&self.timers.slots).push(slot.clone());
                self.slot = Some(slot);
            }
        }
        Poll::Pending
    }
}

/// Why [`WithDeadline`] cut its future off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    Deadline,
    Stopped,
}

/// Runs `inner` until `deadline` or until `stop` is set: `Ok(output)` if it finished first,
/// `Err(why)` (and `inner` is dropped) otherwise. `inner` is polled first, so a future that
/// is ready at once never touches the timer nor the stop signal's waker.
pub(crate) struct WithDeadline<F> {
    pub(crate) inner: Pin<Box<F>>,
    pub(crate) sleep: Sleep,
    pub(crate) stop: StopSignal,
}

impl<F: Future> Future for WithDeadline<F> {
    type Output = Result<F::Output, Cut>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.stop.is_stopped() {
            return Poll::Ready(Err(Cut::Stopped));
        }
        if let Poll::Ready(out) = self.inner.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        if self.stop.register(cx) {
            return Poll::Ready(Err(Cut::Stopped));
        }
        match Pin::new(&mut self.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Cut::Deadline)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Starts the ticker thread. It holds only weak references and exits (within a tick) once the
/// engine is dropped.
pub(crate) fn start_ticker(
    engine: wasmtime::EngineWeak,
    timers: Weak<Timers>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("flo-wasm-epoch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(TICK);
                let (Some(engine), Some(timers)) = (engine.upgrade(), timers.upgrade()) else {
                    return;
                };
                engine.increment_epoch();
                timers.fire(Instant::now());
            }
        })
        .map(|_| ())
}
