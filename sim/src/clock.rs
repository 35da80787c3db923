//! Pluggable clocks (DESIGN.md "The simulator", clocks): virtual time runs as
//! fast as the CPU can go and is deterministic; wall time paces simulated
//! time to the real clock, for the live daemon serving on the simulated GPU.

use std::time::{Duration, Instant};

/// Decides how simulated time relates to real time. The engine calls
/// [`Clock::wait_until`] before processing events at simulated time `t_ns`.
pub trait Clock {
    fn wait_until(&mut self, t_ns: u64);
}

/// Virtual time: never waits.
#[derive(Debug, Default, Clone, Copy)]
pub struct VirtualClock;

impl Clock for VirtualClock {
    fn wait_until(&mut self, _t_ns: u64) {}
}

/// Wall-paced time: simulated time `origin_ns` corresponds to the moment the
/// clock was created, and `t_ns` is reached `t_ns - origin_ns` later.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    start: Instant,
    origin_ns: u64,
}

impl WallClock {
    pub fn new(origin_ns: u64) -> Self {
        WallClock {
            start: Instant::now(),
            origin_ns,
        }
    }

    /// The simulated time that corresponds to now.
    pub fn now_ns(&self) -> u64 {
        self.origin_ns + self.start.elapsed().as_nanos() as u64
    }
}

impl Clock for WallClock {
    fn wait_until(&mut self, t_ns: u64) {
        let target = self.start + Duration::from_nanos(t_ns.saturating_sub(self.origin_ns));
        let now = Instant::now();
        if target > now {
            std::thread::sleep(target - now);
        }
    }
}
