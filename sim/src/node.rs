//! A node of several simulated GPUs (DESIGN.md layer 2: "a node may hold
//! several devices"), for placement across devices (CASE/MGB,
//! ../shared/papers/case-mgb-compiler-guided-sharing.txt §II-B and Fig. 1:
//! a node of several GPUs whose memory the jobs share; §V: 2×P100, 4×V100).
//!
//! Each device is an unchanged single-device [`Sim`]; the node adds what a
//! driver adds across them: *owners* (a process's context: its streams and
//! its device memory on each device) and memory accounting on every
//! allocation. An allocation past a device's capacity fails as a real
//! driver's does (§I: "the process requesting the memory will crash due to
//! the out of memory (OOM) error"): the owner that asked crashes — its
//! queued kernels are cleared, its running kernels killed, all its memory on
//! every device freed — and nothing of any other owner is touched. The node
//! knows no placement policy; that is reef-sched's `place` module.
//!
//! Device lists: `sim:mi50x4` (four MI50s), `sim:gv100x4`, or a list
//! `sim:mi50,gv100` (presets or spec files, each optionally `xN`).
//!
//! Why both this node and `reef-bench multigpu`'s own loop over
//! [`node_devices`] stay: the node's owners (a process's memory and streams
//! across devices, crashed whole on OOM) are what CASE's lazy runtime runs
//! on (bench/tests/lazy_placement.rs); the batch runner needs only per-job
//! streams and memory, which it keeps through reef-exec's `Device`.

use crate::{DeviceEvent, DeviceSpec, KernelLaunch, LaunchId, Sim, SimConfig, SimError, StreamId};
use std::collections::HashMap;

/// An owner of streams and memory: a process (a job), as the driver sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerId(pub u64);

/// The most devices one node may hold (the largest common nodes hold 8–16
/// GPUs; 64 is a bound on input, not a hardware figure).
pub const MAX_NODE_DEVICES: usize = 64;

/// Why a node operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    #[error(
        "invalid device list {spec:?}: {problem} (e.g. sim:mi50x4, sim:gv100x4 or sim:mi50,gv100)"
    )]
    BadList { spec: String, problem: String },
    #[error("no device {0} on this node")]
    NoSuchDevice(usize),
    #[error("stream {stream} of device {device} does not belong to owner {owner}")]
    NotOwner {
        owner: u64,
        device: usize,
        stream: u32,
    },
    #[error("owner {0} has crashed")]
    Crashed(u64),
    #[error(
        "owner {owner} crashed: out of memory on device {device}: {requested} B requested, \
         {free} B of {total} B free"
    )]
    OutOfMemory {
        owner: u64,
        device: usize,
        requested: u64,
        free: u64,
        total: u64,
    },
    #[error("owner {owner} frees {bytes} B on device {device} but holds {held} B there")]
    BadFree {
        owner: u64,
        device: usize,
        bytes: u64,
        held: u64,
    },
    #[error("device {device}: {err}")]
    Sim { device: usize, err: SimError },
}

#[derive(Debug, Clone, Default)]
struct Owner {
    /// Bytes held on each device.
    held: Vec<u64>,
    streams: Vec<(usize, StreamId)>,
    crashed: bool,
}

/// What a crash or an exit released.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Released {
    /// Bytes freed per device.
    pub memory: Vec<u64>,
    /// Streams whose queue was cleared and running kernels killed (crash
    /// only).
    pub streams: Vec<(usize, StreamId)>,
}

/// Several [`Sim`]s with per-owner memory and streams.
pub struct Node {
    devices: Vec<Sim>,
    owners: HashMap<OwnerId, Owner>,
    stream_owner: Vec<HashMap<u32, OwnerId>>,
}

/// Parses `sim:mi50x4`, `sim:gv100x4`, `sim:mi50,gv100`, `mi50x2,h100`
/// into device specs (presets or `.toml` spec files).
pub fn parse_device_list(s: &str) -> Result<Vec<DeviceSpec>, NodeError> {
    let bad = |problem: String| NodeError::BadList {
        spec: s.to_string(),
        problem,
    };
    let body = s.strip_prefix("sim:").unwrap_or(s);
    let mut out = Vec::new();
    for item in body.split(',') {
        let item = item.trim();
        if item.is_empty() {
            return Err(bad("an empty device name".into()));
        }
        let (name, n) = match item.rsplit_once('x') {
            Some((name, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                let n: usize = n
                    .parse()
                    .map_err(|_| bad(format!("{item}: count too large")))?;
                (name, n)
            }
            _ => (item, 1),
        };
        if n == 0 {
            return Err(bad(format!("{item}: a count of zero devices")));
        }
        if out.len() + n > MAX_NODE_DEVICES {
            return Err(bad(format!("more than {MAX_NODE_DEVICES} devices")));
        }
        let spec = DeviceSpec::by_name_or_path(name).map_err(|e| bad(e.to_string()))?;
        out.extend(std::iter::repeat_n(spec, n));
    }
    Ok(out)
}

/// The devices of a node of `specs`, without the node's owners: device `i`
/// is seeded with `cfg.seed + i` (as [`Node::new`] seeds them).
pub fn node_devices(specs: Vec<DeviceSpec>, cfg: SimConfig) -> Vec<Sim> {
    specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            Sim::new(
                s,
                SimConfig {
                    seed: cfg.seed.wrapping_add(i as u64),
                    ..cfg
                },
            )
        })
        .collect()
}

impl Node {
    /// A node of `specs`; device `i` is seeded with `cfg.seed + i`.
    pub fn new(specs: Vec<DeviceSpec>, cfg: SimConfig) -> Result<Self, NodeError> {
        if specs.is_empty() || specs.len() > MAX_NODE_DEVICES {
            return Err(NodeError::BadList {
                spec: format!("{} devices", specs.len()),
                problem: format!("a node holds 1 to {MAX_NODE_DEVICES} devices"),
            });
        }
        let n = specs.len();
        let devices = node_devices(specs, cfg);
        Ok(Self {
            devices,
            owners: HashMap::new(),
            stream_owner: vec![HashMap::new(); n],
        })
    }

    /// A node from a device list (see [`parse_device_list`]).
    pub fn from_list(s: &str, cfg: SimConfig) -> Result<Self, NodeError> {
        Self::new(parse_device_list(s)?, cfg)
    }

    pub fn len(&self) -> usize {
        self.devices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    pub fn device(&self, d: usize) -> Result<&Sim, NodeError> {
        self.devices.get(d).ok_or(NodeError::NoSuchDevice(d))
    }

    fn owner_mut(&mut self, o: OwnerId) -> Result<&mut Owner, NodeError> {
        let n = self.devices.len();
        let ow = self.owners.entry(o).or_insert_with(|| Owner {
            held: vec![0; n],
            ..Owner::default()
        });
        if ow.crashed {
            return Err(NodeError::Crashed(o.0));
        }
        Ok(ow)
    }

    /// A stream on device `d` belonging to `owner`.
    pub fn create_stream(
        &mut self,
        owner: OwnerId,
        d: usize,
        priority: i32,
        capacity: usize,
    ) -> Result<StreamId, NodeError> {
        self.device(d)?;
        self.owner_mut(owner)?;
        let s = self.devices[d]
            .create_stream(priority, capacity)
            .map_err(|err| NodeError::Sim { device: d, err })?;
        self.owner_mut(owner)?.streams.push((d, s));
        self.stream_owner[d].insert(s.0, owner);
        Ok(s)
    }

    /// The owner of a stream.
    pub fn owner_of(&self, d: usize, s: StreamId) -> Option<OwnerId> {
        self.stream_owner.get(d)?.get(&s.0).copied()
    }

    /// Launches on one of the owner's streams.
    pub fn launch(
        &mut self,
        owner: OwnerId,
        d: usize,
        s: StreamId,
        l: KernelLaunch,
    ) -> Result<LaunchId, NodeError> {
        self.device(d)?;
        self.owner_mut(owner)?;
        if self.owner_of(d, s) != Some(owner) {
            return Err(NodeError::NotOwner {
                owner: owner.0,
                device: d,
                stream: s.0,
            });
        }
        self.devices[d]
            .launch(s, l)
            .map_err(|err| NodeError::Sim { device: d, err })
    }

    /// Allocates `bytes` on device `d` for `owner`. Past the device's
    /// capacity the owner crashes ([`Self::crash`]) and the error says so.
    pub fn alloc(&mut self, owner: OwnerId, d: usize, bytes: u64) -> Result<(), NodeError> {
        self.device(d)?;
        self.owner_mut(owner)?;
        match self.devices[d].alloc(bytes) {
            Ok(()) => {
                self.owner_mut(owner)?.held[d] += bytes;
                Ok(())
            }
            Err(SimError::OutOfMemory {
                requested,
                free,
                total,
            }) => {
                self.crash(owner);
                Err(NodeError::OutOfMemory {
                    owner: owner.0,
                    device: d,
                    requested,
                    free,
                    total,
                })
            }
            Err(err) => Err(NodeError::Sim { device: d, err }),
        }
    }

    /// Frees `bytes` the owner holds on device `d`.
    pub fn free(&mut self, owner: OwnerId, d: usize, bytes: u64) -> Result<(), NodeError> {
        self.device(d)?;
        let held = self.owner_mut(owner)?.held[d];
        if bytes > held {
            return Err(NodeError::BadFree {
                owner: owner.0,
                device: d,
                bytes,
                held,
            });
        }
        self.owner_mut(owner)?.held[d] -= bytes;
        self.devices[d].free(bytes);
        Ok(())
    }

    /// Bytes the owner holds on device `d`.
    pub fn held(&self, owner: OwnerId, d: usize) -> u64 {
        self.owners
            .get(&owner)
            .and_then(|o| o.held.get(d).copied())
            .unwrap_or(0)
    }

    pub fn memory_used(&self, d: usize) -> u64 {
        self.devices.get(d).map_or(0, Sim::memory_used)
    }

    pub fn memory_total(&self, d: usize) -> u64 {
        self.devices.get(d).map_or(0, |s| s.spec().memory_bytes)
    }

    pub fn is_crashed(&self, owner: OwnerId) -> bool {
        self.owners.get(&owner).is_some_and(|o| o.crashed)
    }

    /// The owner dies (an OOM, or any fatal error): its device queues are
    /// cleared, its running kernels killed (where the device can kill; else
    /// they run out), and all its memory freed. Other owners are untouched.
    /// Later calls for this owner fail with [`NodeError::Crashed`].
    pub fn crash(&mut self, owner: OwnerId) -> Released {
        let r = self.release_all(owner, true);
        if let Some(o) = self.owners.get_mut(&owner) {
            o.crashed = true;
        }
        r
    }

    /// The owner exits normally: memory it still holds is freed (as a
    /// process exit frees its context); its streams stay, idle.
    pub fn exit(&mut self, owner: OwnerId) -> Released {
        let r = self.release_all(owner, false);
        self.owners.remove(&owner);
        r
    }

    fn release_all(&mut self, owner: OwnerId, kill: bool) -> Released {
        let Some(o) = self.owners.get_mut(&owner) else {
            return Released {
                memory: vec![0; self.devices.len()],
                streams: Vec::new(),
            };
        };
        let memory = std::mem::replace(&mut o.held, vec![0; self.devices.len()]);
        let streams = if kill { o.streams.clone() } else { Vec::new() };
        for (d, &b) in memory.iter().enumerate() {
            self.devices[d].free(b);
        }
        for &(d, s) in &streams {
            let dev = &mut self.devices[d];
            // Both only fail for an unknown stream (not the case) or a
            // device without kills (then the running blocks run out).
            let _ = dev.clear_queue(s);
            let _ = dev.kill_stream(s);
        }
        Released { memory, streams }
    }

    /// Earliest pending event over all devices.
    pub fn next_event_time(&self) -> Option<u64> {
        self.devices.iter().filter_map(Sim::next_event_time).min()
    }

    /// Advances every device to `t`; events tagged with their device.
    pub fn advance_to(&mut self, t: u64) -> Vec<(usize, DeviceEvent)> {
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for (d, s) in self.devices.iter_mut().enumerate() {
            s.advance_into(t, &mut buf);
            out.extend(buf.drain(..).map(|e| (d, e)));
        }
        out.sort_by_key(|&(d, e)| (e.time, d));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, KernelShape, Tags};
    use std::sync::Arc;

    const GIB: u64 = 1 << 30;

    #[test]
    fn device_lists_parse() {
        assert_eq!(parse_device_list("sim:mi50x4").unwrap().len(), 4);
        let v = parse_device_list("sim:mi50,gv100x2").unwrap();
        let names: Vec<_> = v.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mi50", "gv100", "gv100"]);
        for bad in [
            "sim:",
            "sim:mi50x0",
            "sim:rtx",
            "sim:mi50,,mi50",
            "sim:mi50x65",
        ] {
            let e = parse_device_list(bad).unwrap_err();
            assert!(e.to_string().contains("sim:mi50x4"), "{bad}: {e}");
        }
    }

    fn shape(spec: &DeviceSpec) -> Arc<KernelShape> {
        Arc::new(KernelShape::synthetic("k", 240, 256, 0, 0, vec![50_000], spec).unwrap())
    }

    #[test]
    fn an_allocation_past_capacity_crashes_only_its_owner() {
        let mut n = Node::from_list("sim:mi50x2", SimConfig::default()).unwrap();
        let spec = n.device(0).unwrap().spec().clone();
        let (a, b) = (OwnerId(1), OwnerId(2));
        let sa = n.create_stream(a, 0, 0, 4).unwrap();
        let sb = n.create_stream(b, 0, 0, 4).unwrap();
        n.alloc(a, 0, 6 * GIB).unwrap();
        n.alloc(a, 1, 3 * GIB).unwrap();
        n.alloc(b, 0, 8 * GIB).unwrap();
        let k = shape(&spec);
        n.launch(a, 0, sa, KernelLaunch::new(k.clone(), Tags::default()))
            .unwrap();
        let lb = n
            .launch(b, 0, sb, KernelLaunch::new(k.clone(), Tags::default()))
            .unwrap();
        // Let both start.
        n.advance_to(20_000);
        // A asks for 3 GiB on device 0, which has 2 GiB free: A crashes.
        let e = n.alloc(a, 0, 3 * GIB).unwrap_err();
        assert!(
            matches!(
                e,
                NodeError::OutOfMemory {
                    owner: 1,
                    device: 0,
                    ..
                }
            ),
            "{e}"
        );
        assert!(n.is_crashed(a));
        assert_eq!(n.held(a, 0), 0);
        assert_eq!(n.held(a, 1), 0);
        assert_eq!(n.memory_used(0), 8 * GIB);
        assert_eq!(n.memory_used(1), 0);
        assert_eq!(n.held(b, 0), 8 * GIB);
        // A's kernel is killed, B's completes.
        let mut kinds = Vec::new();
        while let Some(t) = n.next_event_time() {
            for (d, ev) in n.advance_to(t) {
                kinds.push((n.owner_of(d, ev.stream).unwrap(), ev.launch, ev.kind));
            }
        }
        assert!(kinds
            .iter()
            .any(|&(o, _, k)| o == a && matches!(k, EventKind::Killed { .. })));
        assert!(kinds.contains(&(b, lb, EventKind::Completed)));
        assert!(!kinds
            .iter()
            .any(|&(o, _, k)| o == b && matches!(k, EventKind::Killed { .. })));
        // A can do nothing more; B can.
        assert_eq!(n.alloc(a, 1, 1), Err(NodeError::Crashed(1)));
        assert!(matches!(
            n.launch(a, 0, sa, KernelLaunch::new(k.clone(), Tags::default())),
            Err(NodeError::Crashed(1))
        ));
        n.alloc(b, 0, 8 * GIB).unwrap();
        assert_eq!(n.memory_used(0), 16 * GIB);
    }

    #[test]
    fn owners_free_what_they_hold_and_only_that() {
        let mut n = Node::from_list("sim:gv100x2", SimConfig::default()).unwrap();
        let (a, b) = (OwnerId(1), OwnerId(2));
        n.alloc(a, 1, 5 * GIB).unwrap();
        n.alloc(b, 1, 2 * GIB).unwrap();
        assert!(matches!(
            n.free(a, 1, 6 * GIB),
            Err(NodeError::BadFree { .. })
        ));
        n.free(a, 1, GIB).unwrap();
        assert_eq!(n.memory_used(1), 6 * GIB);
        let r = n.exit(a);
        assert_eq!(r.memory, vec![0, 4 * GIB]);
        assert_eq!(n.memory_used(1), 2 * GIB);
        // Another's stream is not yours.
        let sb = n.create_stream(b, 0, 0, 2).unwrap();
        let spec = n.device(0).unwrap().spec().clone();
        assert!(matches!(
            n.launch(a, 0, sb, KernelLaunch::new(shape(&spec), Tags::default())),
            Err(NodeError::NotOwner { .. })
        ));
        assert_eq!(n.memory_total(0), 32 * GIB);
    }
}
