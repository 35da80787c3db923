//! The lazy runtime of CASE/MGB §III-A-2 (Chen, Porter, Pande,
//! ../shared/papers/case-mgb-compiler-guided-sharing.txt, Fig. 2 "lazy
//! runtime", and §III-A-3 for the device heap), for the client library.
//!
//! "A call to cudaMalloc will be replaced with lazyMalloc, which will simply
//! assign a pseudo address for representing the memory object to be
//! allocated, instead of performing the actual allocation. [...] For each
//! memory object, a queue is maintained to record GPU operations applied on
//! it [...]. Just before every kernel launch operation [...],
//! kernelLaunchPrepare [...] will interpret the memory objects needed by the
//! kernel, replay the recorded GPU operations for each of them, and replace
//! their pseudo addresses with the real ones." The task's needs go to the
//! scheduler first (`task_begin`), which names the device.
//!
//! [`LazyRuntime`] does exactly that over two traits: [`DeviceOps`] (the
//! real device calls: allocation, copies, launch, free, on a given device)
//! and [`Placement`] (`task_begin` / `task_end`, e.g. a reefd connection or
//! reef-sched's `Placer` in-process). Decisions the paper leaves open, and
//! taken here:
//! - A task is everything allocated while no task is bound: the first
//!   launch declares all of it (memory: the sum of those objects plus the
//!   device heap limit, 8 MiB by default as §III-A-3 measured; threads and
//!   blocks: that launch's). Objects allocated after binding are allocated
//!   directly on the task's device, undeclared (the device itself refuses
//!   them past its capacity, as a real driver does).
//! - The task ends (`task_end`) when its last object is freed.
//! - Reading back (device to host) an object no kernel has used yet is
//!   refused: it was never on a device.

use std::collections::HashMap;

/// Default device heap for in-kernel `malloc` (§III-A-3: "the on-device heap
/// size defaults to 8MB for the NVIDIA devices we tested").
pub const DEFAULT_HEAP_BYTES: u64 = 8 << 20;

/// A pseudo address handed out by [`LazyRuntime::malloc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PseudoPtr(pub u64);

/// What a task declares (the probe's `task_begin(memory, threads, blocks)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    pub memory: u64,
    pub threads_per_block: u32,
    pub blocks: u64,
}

/// The scheduler side: places a task and is told when it ends.
pub trait Placement {
    /// Returns (task id, device index).
    fn task_begin(&mut self, needs: Needs) -> Result<(u64, u32), String>;
    fn task_end(&mut self, task: u64) -> Result<(), String>;
}

/// The device side: real operations on a chosen device.
pub trait DeviceOps {
    type Ptr: Copy + std::fmt::Debug;
    fn malloc(&mut self, device: u32, bytes: u64) -> Result<Self::Ptr, String>;
    fn memcpy_h2d(&mut self, device: u32, dst: Self::Ptr, data: &[u8]) -> Result<(), String>;
    fn memset(&mut self, device: u32, dst: Self::Ptr, value: u8, bytes: u64) -> Result<(), String>;
    fn memcpy_d2h(&mut self, device: u32, src: Self::Ptr, bytes: u64) -> Result<Vec<u8>, String>;
    fn free(&mut self, device: u32, ptr: Self::Ptr) -> Result<(), String>;
    fn launch(
        &mut self,
        device: u32,
        kernel: &str,
        blocks: u64,
        threads_per_block: u32,
        args: &[Self::Ptr],
    ) -> Result<(), String>;
}

/// Why a lazy operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LazyError {
    #[error("{0:?} is not a live allocation of this runtime")]
    UnknownPointer(PseudoPtr),
    #[error("{0:?} has not been used by any kernel yet: its data was never on a device")]
    NeverOnDevice(PseudoPtr),
    #[error("a copy of {len} B at offset {offset} overflows the {bytes} B allocation {ptr:?}")]
    OutOfBounds {
        ptr: PseudoPtr,
        offset: u64,
        len: u64,
        bytes: u64,
    },
    #[error("placement refused the task: {0}")]
    Placement(String),
    #[error("device {device}: {msg}")]
    Device { device: u32, msg: String },
}

#[derive(Debug, Clone)]
enum Recorded {
    H2d(Vec<u8>),
    Memset(u8, u64),
}

#[derive(Debug)]
struct Obj<P> {
    bytes: u64,
    ops: Vec<Recorded>,
    real: Option<P>,
}

/// The lazy runtime of one process (see the module doc).
pub struct LazyRuntime<D: DeviceOps, P: Placement> {
    dev: D,
    place: P,
    objs: HashMap<PseudoPtr, Obj<D::Ptr>>,
    next: u64,
    heap: u64,
    /// The bound task: (task id, device).
    task: Option<(u64, u32)>,
}

impl<D: DeviceOps, P: Placement> LazyRuntime<D, P> {
    pub fn new(dev: D, place: P) -> Self {
        Self {
            dev,
            place,
            objs: HashMap::new(),
            next: 1,
            heap: DEFAULT_HEAP_BYTES,
            task: None,
        }
    }

    pub fn device_ops(&self) -> &D {
        &self.dev
    }

    /// The bound task's device, if a task is running.
    pub fn device(&self) -> Option<u32> {
        self.task.map(|t| t.1)
    }

    /// `cudaDeviceSetLimit(cudaLimitMallocHeapSize, bytes)` (§III-A-3): the
    /// next task declares this much device heap.
    pub fn set_heap_limit(&mut self, bytes: u64) {
        self.heap = bytes;
    }

    fn derr(device: u32) -> impl Fn(String) -> LazyError {
        move |msg| LazyError::Device { device, msg }
    }

    /// `lazyMalloc`: a pseudo address now; the allocation happens at the
    /// launch that first needs it (or now, on the bound task's device).
    pub fn malloc(&mut self, bytes: u64) -> Result<PseudoPtr, LazyError> {
        let p = PseudoPtr(self.next);
        self.next += 1;
        let real = match self.task {
            Some((_, d)) => Some(self.dev.malloc(d, bytes).map_err(Self::derr(d))?),
            None => None,
        };
        self.objs.insert(
            p,
            Obj {
                bytes,
                ops: Vec::new(),
                real,
            },
        );
        Ok(p)
    }

    fn obj(&mut self, p: PseudoPtr) -> Result<&mut Obj<D::Ptr>, LazyError> {
        self.objs.get_mut(&p).ok_or(LazyError::UnknownPointer(p))
    }

    /// Host-to-device copy of `data` into the whole object (as Fig. 3's
    /// `cudaMemcpy(dA, A, N, ...)`): recorded, or done on the bound device.
    pub fn memcpy_h2d(&mut self, p: PseudoPtr, data: &[u8]) -> Result<(), LazyError> {
        let task = self.task;
        let o = self.obj(p)?;
        if data.len() as u64 > o.bytes {
            return Err(LazyError::OutOfBounds {
                ptr: p,
                offset: 0,
                len: data.len() as u64,
                bytes: o.bytes,
            });
        }
        match (o.real, task) {
            (Some(r), Some((_, d))) => self.dev.memcpy_h2d(d, r, data).map_err(Self::derr(d)),
            _ => {
                o.ops.push(Recorded::H2d(data.to_vec()));
                Ok(())
            }
        }
    }

    /// `cudaMemset`: recorded, or done on the bound device.
    pub fn memset(&mut self, p: PseudoPtr, value: u8) -> Result<(), LazyError> {
        let task = self.task;
        let o = self.obj(p)?;
        let n = o.bytes;
        match (o.real, task) {
            (Some(r), Some((_, d))) => self.dev.memset(d, r, value, n).map_err(Self::derr(d)),
            _ => {
                o.ops.push(Recorded::Memset(value, n));
                Ok(())
            }
        }
    }

    /// `kernelLaunchPrepare` and the launch: with no task bound, declares
    /// the task (every unbound object + the heap, this launch's shape),
    /// then allocates and replays every unbound object on the chosen
    /// device, and launches with the real addresses.
    pub fn launch(
        &mut self,
        kernel: &str,
        blocks: u64,
        threads_per_block: u32,
        args: &[PseudoPtr],
    ) -> Result<u32, LazyError> {
        for a in args {
            self.obj(*a)?;
        }
        let d = match self.task {
            Some((_, d)) => d,
            None => {
                let memory = self
                    .objs
                    .values()
                    .filter(|o| o.real.is_none())
                    .map(|o| o.bytes)
                    .sum::<u64>()
                    + self.heap;
                let (task, d) = self
                    .place
                    .task_begin(Needs {
                        memory,
                        threads_per_block,
                        blocks,
                    })
                    .map_err(LazyError::Placement)?;
                self.task = Some((task, d));
                d
            }
        };
        // Replay in pseudo-address order (allocation order).
        let mut unbound: Vec<PseudoPtr> = self
            .objs
            .iter()
            .filter(|(_, o)| o.real.is_none())
            .map(|(p, _)| *p)
            .collect();
        unbound.sort_by_key(|p| p.0);
        for p in unbound {
            let o = self.objs.get_mut(&p).expect("listed above");
            let r = self.dev.malloc(d, o.bytes).map_err(Self::derr(d))?;
            o.real = Some(r);
            for op in std::mem::take(&mut o.ops) {
                match op {
                    Recorded::H2d(data) => self.dev.memcpy_h2d(d, r, &data),
                    Recorded::Memset(v, n) => self.dev.memset(d, r, v, n),
                }
                .map_err(Self::derr(d))?;
            }
        }
        let real: Vec<D::Ptr> = args
            .iter()
            .map(|a| self.objs[a].real.expect("bound above"))
            .collect();
        self.dev
            .launch(d, kernel, blocks, threads_per_block, &real)
            .map_err(Self::derr(d))?;
        Ok(d)
    }

    /// Device-to-host copy of the whole object.
    pub fn memcpy_d2h(&mut self, p: PseudoPtr) -> Result<Vec<u8>, LazyError> {
        let task = self.task;
        let o = self.obj(p)?;
        let n = o.bytes;
        match (o.real, task) {
            (Some(r), Some((_, d))) => self.dev.memcpy_d2h(d, r, n).map_err(Self::derr(d)),
            _ => Err(LazyError::NeverOnDevice(p)),
        }
    }

    /// `cudaFree`; the last free of a task's objects ends the task.
    pub fn free(&mut self, p: PseudoPtr) -> Result<(), LazyError> {
        let o = self.objs.remove(&p).ok_or(LazyError::UnknownPointer(p))?;
        if let (Some(r), Some((_, d))) = (o.real, self.task) {
            self.dev.free(d, r).map_err(Self::derr(d))?;
        }
        if let Some((task, _)) = self.task {
            if self.objs.values().all(|o| o.real.is_none()) {
                self.task = None;
                self.place.task_end(task).map_err(LazyError::Placement)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device that logs every call and keeps buffer contents.
    #[derive(Default)]
    struct Fake {
        log: Vec<String>,
        mem: HashMap<u64, Vec<u8>>,
        next: u64,
        capacity: u64,
        used: u64,
    }

    impl DeviceOps for Fake {
        type Ptr = u64;
        fn malloc(&mut self, d: u32, bytes: u64) -> Result<u64, String> {
            if self.used + bytes > self.capacity {
                return Err(format!("out of memory: {bytes} B"));
            }
            self.used += bytes;
            self.next += 0x1000;
            self.mem.insert(self.next, vec![0; bytes as usize]);
            self.log
                .push(format!("malloc d{d} {bytes} -> {:#x}", self.next));
            Ok(self.next)
        }
        fn memcpy_h2d(&mut self, d: u32, dst: u64, data: &[u8]) -> Result<(), String> {
            self.mem.get_mut(&dst).unwrap()[..data.len()].copy_from_slice(data);
            self.log.push(format!("h2d d{d} {dst:#x} {}", data.len()));
            Ok(())
        }
        fn memset(&mut self, d: u32, dst: u64, v: u8, n: u64) -> Result<(), String> {
            self.mem.get_mut(&dst).unwrap()[..n as usize].fill(v);
            self.log.push(format!("memset d{d} {dst:#x} {v}"));
            Ok(())
        }
        fn memcpy_d2h(&mut self, _d: u32, src: u64, n: u64) -> Result<Vec<u8>, String> {
            Ok(self.mem[&src][..n as usize].to_vec())
        }
        fn free(&mut self, d: u32, p: u64) -> Result<(), String> {
            self.used -= self.mem.remove(&p).unwrap().len() as u64;
            self.log.push(format!("free d{d} {p:#x}"));
            Ok(())
        }
        fn launch(&mut self, d: u32, k: &str, b: u64, t: u32, args: &[u64]) -> Result<(), String> {
            // "VecAdd": C = A + B, byte-wise.
            if k == "vecadd" {
                let (a, bb) = (self.mem[&args[0]].clone(), self.mem[&args[1]].clone());
                let c = self.mem.get_mut(&args[2]).unwrap();
                for i in 0..c.len() {
                    c[i] = a[i].wrapping_add(bb[i]);
                }
            }
            self.log.push(format!("launch d{d} {k} {b}x{t} {args:x?}"));
            Ok(())
        }
    }

    #[derive(Default)]
    struct Sched {
        begun: Vec<Needs>,
        ended: Vec<u64>,
        device: u32,
    }
    impl Placement for Sched {
        fn task_begin(&mut self, n: Needs) -> Result<(u64, u32), String> {
            self.begun.push(n);
            Ok((self.begun.len() as u64, self.device))
        }
        fn task_end(&mut self, t: u64) -> Result<(), String> {
            self.ended.push(t);
            Ok(())
        }
    }

    fn rt(device: u32) -> LazyRuntime<Fake, Sched> {
        LazyRuntime::new(
            Fake {
                capacity: 1 << 30,
                ..Fake::default()
            },
            Sched {
                device,
                ..Sched::default()
            },
        )
    }

    /// Fig. 3's task: three allocations, two copies, a launch, a copy back
    /// and three frees; nothing touches the device before the launch.
    #[test]
    fn fig3_vecadd_is_deferred_then_replayed_on_the_chosen_device() {
        let mut r = rt(2);
        let n = 256u64;
        let (a, b, c) = (
            r.malloc(n).unwrap(),
            r.malloc(n).unwrap(),
            r.malloc(n).unwrap(),
        );
        r.memcpy_h2d(a, &vec![1u8; n as usize]).unwrap();
        r.memcpy_h2d(b, &vec![2u8; n as usize]).unwrap();
        assert!(r.dev.log.is_empty(), "{:?}", r.dev.log);
        assert_eq!(r.memcpy_d2h(c), Err(LazyError::NeverOnDevice(c)));
        assert_eq!(r.launch("vecadd", n / 128, 128, &[a, b, c]).unwrap(), 2);
        assert_eq!(
            r.place.begun,
            vec![Needs {
                memory: 3 * n + DEFAULT_HEAP_BYTES,
                threads_per_block: 128,
                blocks: 2
            }]
        );
        // Every operation ran on device 2, allocations first in order.
        assert!(
            r.dev.log.iter().all(|l| l.contains(" d2 ")),
            "{:?}",
            r.dev.log
        );
        assert!(r.dev.log[0].starts_with("malloc") && r.dev.log[1].starts_with("h2d"));
        assert_eq!(r.memcpy_d2h(c).unwrap(), vec![3u8; n as usize]);
        r.free(a).unwrap();
        r.free(b).unwrap();
        assert!(r.place.ended.is_empty());
        r.free(c).unwrap();
        assert_eq!(r.place.ended, vec![1]);
        assert_eq!(r.dev.used, 0);
        assert_eq!(r.device(), None);
    }

    #[test]
    fn heap_limit_and_second_task_and_errors() {
        let mut r = rt(1);
        r.set_heap_limit(64 << 20);
        let x = r.malloc(100).unwrap();
        r.memset(x, 7).unwrap();
        r.launch("k", 1, 32, &[x]).unwrap();
        assert_eq!(r.place.begun[0].memory, 100 + (64 << 20));
        // Allocated while bound: on the task's device now, not declared.
        let y = r.malloc(50).unwrap();
        assert!(r.dev.log.last().unwrap().starts_with("malloc d1 50"));
        r.free(x).unwrap();
        assert!(r.place.ended.is_empty(), "y still holds the task");
        r.free(y).unwrap();
        assert_eq!(r.place.ended, vec![1]);
        // A new task after the first ended.
        let z = r.malloc(10).unwrap();
        r.launch("k", 1, 32, &[z]).unwrap();
        assert_eq!(r.place.begun.len(), 2);
        assert_eq!(
            r.free(PseudoPtr(999)),
            Err(LazyError::UnknownPointer(PseudoPtr(999)))
        );
        assert!(matches!(
            r.memcpy_h2d(z, &[0; 11]),
            Err(LazyError::OutOfBounds { .. })
        ));
        // The device refuses past its capacity (a real driver's OOM).
        let big = r.malloc(2 << 30);
        assert!(matches!(big, Err(LazyError::Device { device: 1, .. })));
    }
}
