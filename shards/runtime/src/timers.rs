//! The shard's alarm clock: sleeps until the earliest time the engine asked to be woken
//! (`Effect::WakeAt`), then feeds it `Input::Tick`.

use crate::inbox::{Inbox, Signal};
use flo_engine::Input;
use flo_engine::clock::{Clock, SystemClock};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

/// Longest the timer sleeps without looking at the clock.
const SLEEP_MS_MAX: u64 = 1000;

#[derive(Default)]
pub struct Alarm {
    at: Cell<Option<u64>>,
    changed: Signal,
}

impl Alarm {
    /// Wakes the engine at `wall_ms` (or earlier, if asked for earlier).
    pub fn set(&self, wall_ms: u64) {
        if self.at.get().is_none_or(|at| wall_ms < at) {
            self.at.set(Some(wall_ms));
            self.changed.notify();
        }
    }
}

pub async fn alarm_loop(
    alarm: Rc<Alarm>,
    inbox: Rc<Inbox>,
    pulse: std::sync::Arc<Vec<crate::kick::Pulse>>,
    shard: usize,
) {
    loop {
        pulse[shard].beat();
        let now = SystemClock.now_ms();
        match alarm.at.get() {
            Some(at) if at <= now => {
                alarm.at.set(None);
                inbox.push(Input::Tick);
                // Let the loop handle it before looking again.
                futures_lite::future::yield_now().await;
            }
            at => {
                let sleep = at.map_or(SLEEP_MS_MAX, |at| (at - now).min(SLEEP_MS_MAX));
                futures_lite::future::or(
                    glommio::timer::sleep(Duration::from_millis(sleep)),
                    alarm.changed.wait(),
                )
                .await;
            }
        }
    }
}
