//! The client library's lazy runtime (reefd::lazy, CASE/MGB §III-A-2)
//! driving reef-sched's placement (Alg. 3) and reef-sim's multi-device
//! node in one process: each "process" defers its allocations until its
//! first launch, declares the task, and the allocations land on the device
//! the policy chose, with the node accounting every byte.

use reef_sched::place::{Begin, DeviceLimits, JobId, PlacePolicy, Placer, TaskId, TaskNeeds};
use reef_sim::{KernelLaunch, KernelShape, Node, OwnerId, SimConfig, Tags};
use reefd::lazy::{DeviceOps, LazyRuntime, Needs, Placement, PseudoPtr};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

const GIB: u64 = 1 << 30;

struct NodeOps {
    node: Rc<RefCell<Node>>,
    owner: OwnerId,
    next: u64,
    sizes: HashMap<u64, (u32, u64)>,
}

impl DeviceOps for NodeOps {
    type Ptr = u64;
    fn malloc(&mut self, d: u32, bytes: u64) -> Result<u64, String> {
        self.node
            .borrow_mut()
            .alloc(self.owner, d as usize, bytes)
            .map_err(|e| e.to_string())?;
        self.next += 1;
        self.sizes.insert(self.next, (d, bytes));
        Ok(self.next)
    }
    fn memcpy_h2d(&mut self, _: u32, _: u64, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
    fn memset(&mut self, _: u32, _: u64, _: u8, _: u64) -> Result<(), String> {
        Ok(())
    }
    fn memcpy_d2h(&mut self, _: u32, _: u64, n: u64) -> Result<Vec<u8>, String> {
        Ok(vec![0; n as usize])
    }
    fn free(&mut self, d: u32, p: u64) -> Result<(), String> {
        let (_, b) = self.sizes.remove(&p).ok_or("bad pointer")?;
        self.node
            .borrow_mut()
            .free(self.owner, d as usize, b)
            .map_err(|e| e.to_string())
    }
    fn launch(&mut self, d: u32, k: &str, b: u64, t: u32, _: &[u64]) -> Result<(), String> {
        let mut n = self.node.borrow_mut();
        let spec = n
            .device(d as usize)
            .map_err(|e| e.to_string())?
            .spec()
            .clone();
        let shape = KernelShape::synthetic(k, b as u32, t, 0, 0, vec![10_000], &spec)
            .map_err(|e| e.to_string())?;
        let s = n
            .create_stream(self.owner, d as usize, 0, 4)
            .map_err(|e| e.to_string())?;
        n.launch(
            self.owner,
            d as usize,
            s,
            KernelLaunch::new(Arc::new(shape), Tags::default()),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    }
}

struct PlacerLink {
    placer: Rc<RefCell<Placer>>,
    job: u64,
    tasks: u64,
}

impl Placement for PlacerLink {
    fn task_begin(&mut self, n: Needs) -> Result<(u64, u32), String> {
        self.tasks += 1;
        let id = self.job * 100 + self.tasks;
        let needs = TaskNeeds {
            memory: n.memory,
            threads_per_block: n.threads_per_block,
            blocks: n.blocks,
        };
        match self
            .placer
            .borrow_mut()
            .task_begin(JobId(self.job), TaskId(id), needs)
            .map_err(|e| e.to_string())?
        {
            Begin::Placed(d) => Ok((id, d as u32)),
            // A real client blocks here until `poll_placed` names its task.
            Begin::Waiting => Err("waiting for a device".into()),
        }
    }
    fn task_end(&mut self, t: u64) -> Result<(), String> {
        self.placer
            .borrow_mut()
            .task_end(TaskId(t))
            .map_err(|e| e.to_string())
    }
}

fn process(
    node: &Rc<RefCell<Node>>,
    placer: &Rc<RefCell<Placer>>,
    job: u64,
) -> LazyRuntime<NodeOps, PlacerLink> {
    LazyRuntime::new(
        NodeOps {
            node: node.clone(),
            owner: OwnerId(job),
            next: 0,
            sizes: HashMap::new(),
        },
        PlacerLink {
            placer: placer.clone(),
            job,
            tasks: 0,
        },
    )
}

#[test]
fn lazy_allocations_land_where_alg3_places_the_task() {
    let node = Rc::new(RefCell::new(
        Node::from_list("sim:mi50x2", SimConfig::default()).unwrap(),
    ));
    let lim: Vec<DeviceLimits> = (0..2)
        .map(|d| {
            let n = node.borrow();
            let s = n.device(d).unwrap().spec();
            DeviceLimits {
                sms: s.compute_units,
                warp_size: s.wave_size,
                max_warps_per_sm: s.max_waves_per_cu,
                max_blocks_per_sm: s.max_blocks_per_cu,
                max_threads_per_sm: s.max_threads_per_cu,
                memory: s.memory_bytes,
            }
        })
        .collect();
    let placer = Rc::new(RefCell::new(Placer::new(PlacePolicy::Alg3, lim).unwrap()));

    let mut a = process(&node, &placer, 1);
    let mut b = process(&node, &placer, 2);
    let mut c = process(&node, &placer, 3);
    let alloc = |r: &mut LazyRuntime<NodeOps, PlacerLink>| -> Vec<PseudoPtr> {
        (0..5).map(|_| r.malloc(2 * GIB).unwrap()).collect()
    };
    let (pa, pb, pc) = (alloc(&mut a), alloc(&mut b), alloc(&mut c));
    // Nothing is on any device before a launch.
    assert_eq!(
        node.borrow().memory_used(0) + node.borrow().memory_used(1),
        0
    );
    assert_eq!(a.launch("k", 120, 256, &pa[..2]).unwrap(), 0);
    assert_eq!(node.borrow().memory_used(0), 10 * GIB);
    // Device 0 has 6 GiB left: B's 10 GiB go to device 1.
    assert_eq!(b.launch("k", 120, 256, &pb[..1]).unwrap(), 1);
    assert_eq!(node.borrow().memory_used(1), 10 * GIB);
    // C fits nowhere now: it waits, and nothing of it was allocated.
    assert!(c.launch("k", 60, 64, &pc[..1]).is_err());
    assert_eq!(
        node.borrow().held(OwnerId(3), 0) + node.borrow().held(OwnerId(3), 1),
        0
    );
    // A frees everything: its task ends and C is placed on device 0.
    for p in pa {
        a.free(p).unwrap();
    }
    assert_eq!(node.borrow().memory_used(0), 0);
    assert_eq!(placer.borrow_mut().poll_placed(), Some((TaskId(301), 0)));
    assert_eq!(
        placer.borrow().device(0).unwrap().memory_used,
        10 * GIB + reefd::lazy::DEFAULT_HEAP_BYTES
    );
    // B's device is untouched throughout.
    assert_eq!(node.borrow().held(OwnerId(2), 1), 10 * GIB);
}
