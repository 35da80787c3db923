//! Launches of several parts that the scheduler sees as one kernel: a
//! padded launch (REEF §5.1, Fig. 12: the real-time kernel's part and the
//! best-effort parts, [`crate::PadExec`]) and a fused launch (Aker §5.4,
//! Fig. 7: the LC and BE components, [`crate::aker::FuseExec`]). Both are
//! one [`crate::Device::launch_padded`] whose parts report their own device
//! events; the group is reported once, as its head part's kernel: started
//! when the head part starts, and finished when its last part has finished
//! (killed if any part was killed, else evicted if any part was evicted or
//! cleared, else completed). One copy of that folding, so the two
//! executors cannot drift apart.

use reef_sched::{KernelTag, Time};
use reef_sim::{DeviceEvent, EventKind, LaunchId, StreamId, Tags};
use std::collections::HashMap;

/// One multi-part launch in flight; `info` is what its executor keeps
/// beside it.
pub(crate) struct PartGroup<T> {
    pub(crate) info: T,
    /// The head part's kernel, as reported.
    tag: KernelTag,
    /// The stream the launch went to and the head part's launch id.
    s0: StreamId,
    head: LaunchId,
    /// Parts not yet finished (completed, evicted, cleared or killed).
    parts_left: usize,
    /// How the parts that finished ended: the worst outcome is reported.
    killed: bool,
    evicted: bool,
    /// When the head part started.
    pub(crate) started: Option<Time>,
}

impl<T> PartGroup<T> {
    /// Tracks a launch of parts `ids` (one launch id per part, as the
    /// device answered) on stream `s0`, reported as kernel `tag` through
    /// part `ids[head]`, in `pending` (by head launch id) and `part_of`
    /// (each part's launch id, the head's included, → the head's).
    pub(crate) fn track(
        pending: &mut HashMap<LaunchId, PartGroup<T>>,
        part_of: &mut HashMap<LaunchId, LaunchId>,
        ids: &[LaunchId],
        head: usize,
        tag: KernelTag,
        s0: StreamId,
        info: T,
    ) {
        let h = ids[head];
        for &id in ids {
            part_of.insert(id, h);
        }
        pending.insert(
            h,
            PartGroup {
                info,
                tag,
                s0,
                head: h,
                parts_left: ids.len(),
                killed: false,
                evicted: false,
                started: None,
            },
        );
    }

    /// Filters a device event against the groups tracked in `pending` and
    /// `part_of` (see [`PartGroup::track`] and the module doc): the event
    /// to report, if any. Events of plain launches pass; of a group's
    /// parts, the head part's start passes, and when the last part has
    /// finished the group is reported as its head part's kernel, after
    /// `done(group, event)` has seen it (the executor's books). Each part's
    /// own end (completed, evicted, cleared or killed) is shown to
    /// `part(info, event, is_head)` first.
    pub(crate) fn filter(
        pending: &mut HashMap<LaunchId, PartGroup<T>>,
        part_of: &mut HashMap<LaunchId, LaunchId>,
        ev: &DeviceEvent,
        part: impl FnOnce(&mut T, &DeviceEvent, bool),
        done: impl FnOnce(&PartGroup<T>, &DeviceEvent),
    ) -> Option<DeviceEvent> {
        let Some(&head) = part_of.get(&ev.launch) else {
            return Some(*ev);
        };
        let p = pending.get_mut(&head)?;
        match ev.kind {
            EventKind::Started => {
                if ev.launch != head {
                    return None;
                }
                p.started = Some(ev.time);
                return Some(*ev);
            }
            EventKind::Completed => {}
            EventKind::Evicted | EventKind::Cleared => p.evicted = true,
            EventKind::Killed { .. } => p.killed = true,
        }
        part(&mut p.info, ev, ev.launch == head);
        part_of.remove(&ev.launch);
        p.parts_left -= 1;
        if p.parts_left > 0 {
            return None;
        }
        let p = pending.remove(&head)?;
        let kind = if p.killed {
            // Blocks done are not meaningful for a launch of parts as a
            // whole.
            EventKind::Killed { blocks_done: 0 }
        } else if p.evicted {
            EventKind::Evicted
        } else {
            EventKind::Completed
        };
        let e = DeviceEvent {
            time: ev.time,
            stream: p.s0,
            launch: p.head,
            tags: Tags {
                task: p.tag.req.0,
                kernel: p.tag.kernel,
                user: 0,
            },
            kind,
        };
        done(&p, &e);
        Some(e)
    }
}
