//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)]

use reef_sim::*;

/// Tags of kernel 0 of `task`.
pub fn tags(task: u64) -> Tags {
    Tags {
        task,
        kernel: 0,
        user: 0,
    }
}

/// Runs the simulator until nothing is left, checking its invariants after
/// every step; every event in order.
pub fn drain(sim: &mut Sim) -> Vec<DeviceEvent> {
    let mut all = Vec::new();
    while let Some((_, evs)) = sim.step() {
        sim.check_invariants().unwrap();
        all.extend(evs);
    }
    all
}

/// When launch `id` produced its first event of `kind`.
pub fn event_time(evs: &[DeviceEvent], id: LaunchId, kind: EventKind) -> u64 {
    evs.iter()
        .find(|e| e.launch == id && e.kind == kind)
        .unwrap_or_else(|| panic!("{id:?} has no {kind:?}: {evs:?}"))
        .time
}
