//! Cost of a placement decision (issue 16: below 5 us at 8 devices and
//! 1,000 waiting tasks; CASE/MGB §III-B: "both scheduling algorithms are
//! designed to be very simple to minimize the runtime overheads").
//!
//! The node: 8 devices with a V100's limits (80 SMs, 64 warps, 32 blocks,
//! 2048 threads per SM, 16 GiB). Each device runs a resident task holding
//! 15 GiB, and 1,000 tasks of 2–9 GiB wait (they fit no device now).
//!
//! `begin_end/<policy>`: one `task_begin` of a 512 MiB task (placed: a
//! decision over 8 devices) and its `task_end` (a release, which
//! reconsiders all 1,000 waiting tasks in arrival order); the figure is per
//! pair. `rescan/<policy>`: the worst release for Alg. 2, where every
//! waiting task fits in memory and fails on compute, so each of the 1,000
//! is emulated on every SM of all 8 devices; the figure is per waiting task
//! reconsidered (throughput in elements).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use reef_sched::place::*;

const GIB: u64 = 1 << 30;
const DEVICES: usize = 8;
const WAITING: u64 = 1000;

fn v100() -> DeviceLimits {
    DeviceLimits {
        sms: 80,
        warp_size: 32,
        max_warps_per_sm: 64,
        max_blocks_per_sm: 32,
        max_threads_per_sm: 2048,
        memory: 16 * GIB,
    }
}

fn needs(memory: u64, threads_per_block: u32, blocks: u64) -> TaskNeeds {
    TaskNeeds {
        memory,
        threads_per_block,
        blocks,
    }
}

/// Devices loaded by one resident task each, `WAITING` tasks waiting.
fn loaded(
    pol: PlacePolicy,
    resident_mem: u64,
    resident_tpb: u32,
    waiting_mem: impl Fn(u64) -> u64,
) -> Placer {
    let mut p = Placer::new(pol, vec![v100(); DEVICES]).unwrap();
    for d in 0..DEVICES as u64 {
        let b = p
            .task_begin(JobId(d), TaskId(d), needs(resident_mem, resident_tpb, 160))
            .unwrap();
        assert!(matches!(b, Begin::Placed(_)));
    }
    for i in 0..WAITING {
        let t = 1_000 + i;
        let b = p
            .task_begin(JobId(t), TaskId(t), needs(waiting_mem(i), 256, 700 + i))
            .unwrap();
        assert_eq!(b, Begin::Waiting);
    }
    p
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("place");
    for (name, pol) in [("alg3", PlacePolicy::Alg3), ("alg2", PlacePolicy::Alg2)] {
        let mut p = loaded(pol, 15 * GIB, 960, |i| (2 + i % 8) * GIB);
        let mut t = 1_000_000u64;
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("begin_end/{name}"), |b| {
            b.iter(|| {
                t += 1;
                let r = p.task_begin(JobId(t), TaskId(t), needs(GIB / 2, 128, 8));
                assert!(matches!(r, Ok(Begin::Placed(_))));
                p.task_end(TaskId(t)).unwrap();
            })
        });
        assert_eq!(p.waiting(), WAITING as usize);
    }
    // Alg. 2's worst release: the waiting tasks fit in memory (1 GiB) but
    // no SM has room for one of their 256-thread blocks (resident: 160
    // blocks x 960 threads, two per SM, 128 threads and 4 warps left), so
    // every one is emulated on every SM and stays waiting.
    let mut p = loaded(PlacePolicy::Alg2, 4 * GIB, 960, |_| GIB);
    let mut t = 1_000_000u64;
    g.throughput(Throughput::Elements(WAITING));
    g.bench_function("rescan/alg2", |b| {
        b.iter(|| {
            t += 1;
            // A 64-thread task fits beside the resident ones; its end
            // reconsiders the 1,000 waiting tasks.
            let r = p.task_begin(JobId(t), TaskId(t), needs(GIB / 4, 64, 1));
            assert!(matches!(r, Ok(Begin::Placed(_))));
            p.task_end(TaskId(t)).unwrap();
        })
    });
    assert_eq!(p.waiting(), WAITING as usize);
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
