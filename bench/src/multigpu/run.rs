//! The batch runner of `reef-bench multigpu` (CASE/MGB §V-A): every job is
//! queued at time 0; a pool of workers each takes a job, runs it and takes
//! the next. A job does its host work, declares its task (`task_begin`),
//! allocates its memory on the device the placement policy chose (an
//! allocation past capacity crashes it: it ends there, holding nothing,
//! with no stream yet), runs its kernels and host steps on its own stream
//! (concurrent with other jobs' streams on the device, as under MPS),
//! frees, and ends its task (`task_end`). Virtual time on a node of
//! simulated devices (reef-sim's `node_devices`, seeded as its `Node`),
//! each driven through reef-exec's [`Device`] interface; placement by
//! reef-sched's `Placer`.

use super::jobs::{Job, Step};
use anyhow::{bail, Result};
use reef_exec::Device;
use reef_sched::place::{Begin, JobId, PlaceError, PlacePolicy, Placer, TaskId};
use reef_sim::{DeviceEvent, DeviceSpec, EventKind, KernelLaunch, SimConfig, StreamId, Tags};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

/// The depth of a stream's launch queue: CUDA queues about a thousand
/// pending launches per stream before `cudaLaunchKernel` blocks (assumed;
/// only its being deeper than any burst here matters).
const STREAM_QUEUE: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Queued,
    /// Host work before the task.
    Pre,
    Waiting,
    /// Inside the task: host steps and kernels.
    InTask,
    Done,
    Crashed,
    Refused,
}

struct Run {
    state: State,
    step: usize,
    outstanding: usize,
    dev: usize,
    stream: StreamId,
    started_at: u64,
    kernel_ns: u64,
    wait_since: u64,
    wait_ns: u64,
    end: u64,
}

/// One job's outcome.
#[derive(Debug, Clone)]
pub struct JobOutcome {
    pub name: String,
    /// Completion time (all jobs arrive at 0, so also the turnaround).
    pub end_ns: u64,
    pub crashed: bool,
    /// Sum of its kernels' times from first block placed to completion.
    pub kernel_ns: u64,
    /// Time spent waiting for placement.
    pub wait_ns: u64,
    pub device: Option<usize>,
}

/// A run's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub makespan_ns: u64,
    pub jobs: Vec<JobOutcome>,
}

impl Outcome {
    pub fn completed(&self) -> usize {
        self.jobs.iter().filter(|j| !j.crashed).count()
    }
    pub fn crashed(&self) -> usize {
        self.jobs.iter().filter(|j| j.crashed).count()
    }
    /// Completed jobs per second.
    pub fn throughput(&self) -> f64 {
        self.completed() as f64 / (self.makespan_ns.max(1) as f64 / 1e9)
    }
    /// Mean turnaround of the completed jobs.
    pub fn mean_turnaround_ns(&self) -> f64 {
        let v: Vec<u64> = self
            .jobs
            .iter()
            .filter(|j| !j.crashed)
            .map(|j| j.end_ns)
            .collect();
        v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
    }
    pub fn mean_wait_ns(&self) -> f64 {
        self.jobs.iter().map(|j| j.wait_ns).sum::<u64>() as f64 / self.jobs.len().max(1) as f64
    }
}

struct Batch<'a, D: Device> {
    devs: Vec<D>,
    /// The job owning each stream, by device.
    owner: Vec<HashMap<StreamId, usize>>,
    placer: Placer,
    jobs: &'a [Job],
    runs: Vec<Run>,
    queue: VecDeque<usize>,
    timers: BinaryHeap<Reverse<(u64, usize)>>,
}

/// Runs `jobs` on a node of `specs` with `workers` workers under `policy`.
pub fn run(
    specs: &[DeviceSpec],
    policy: PlacePolicy,
    jobs: &[Job],
    workers: usize,
) -> Result<Outcome> {
    if workers == 0 {
        bail!("at least one worker is needed");
    }
    if specs.is_empty() {
        bail!("at least one device is needed");
    }
    let devs = reef_sim::node_devices(specs.to_vec(), SimConfig::default());
    let placer = Placer::new(policy, specs.iter().map(super::jobs::limits).collect())?;
    run_on(devs, placer, jobs, workers)
}

/// The batch on `devs` (one per placer device).
fn run_on<D: Device>(
    devs: Vec<D>,
    placer: Placer,
    jobs: &[Job],
    workers: usize,
) -> Result<Outcome> {
    let mut s = Batch {
        owner: vec![HashMap::new(); devs.len()],
        devs,
        placer,
        jobs,
        runs: (0..jobs.len())
            .map(|_| Run {
                state: State::Queued,
                step: 0,
                outstanding: 0,
                dev: 0,
                stream: StreamId(0),
                started_at: 0,
                kernel_ns: 0,
                wait_since: 0,
                wait_ns: 0,
                end: 0,
            })
            .collect(),
        queue: (0..jobs.len()).collect(),
        timers: BinaryHeap::new(),
    };
    for _ in 0..workers {
        s.next_job(0)?;
    }
    let (mut evs, mut buf) = (Vec::new(), Vec::new());
    loop {
        let tn = s.devs.iter().filter_map(|d| d.next_event_time()).min();
        let tt = s.timers.peek().map(|r| r.0 .0);
        let t = match (tn, tt) {
            (None, None) => break,
            (a, b) => a.into_iter().chain(b).min().unwrap(),
        };
        // Every device to `t`, the events in time order, device order
        // among equal times (each device's own order kept).
        evs.clear();
        for (d, dev) in s.devs.iter_mut().enumerate() {
            dev.advance_into(t, &mut buf);
            evs.extend(buf.drain(..).map(|e: DeviceEvent| (d, e)));
        }
        evs.sort_by_key(|&(d, e)| (e.time, d));
        for &(d, ev) in &evs {
            let Some(&i) = s.owner[d].get(&ev.stream) else {
                continue;
            };
            if s.runs[i].state != State::InTask {
                continue; // a crashed job's killed or cleared kernels
            }
            match ev.kind {
                EventKind::Started => s.runs[i].started_at = ev.time,
                EventKind::Completed => {
                    let r = &mut s.runs[i];
                    r.kernel_ns += ev.time - r.started_at;
                    r.outstanding -= 1;
                    if r.outstanding == 0 {
                        s.steps(i, ev.time)?;
                    }
                }
                k => bail!("job {i}: unexpected device event {k:?}"),
            }
        }
        while let Some(&Reverse((tt, i))) = s.timers.peek() {
            if tt > t {
                break;
            }
            s.timers.pop();
            match s.runs[i].state {
                State::Pre => s.begin(i, t)?,
                State::InTask => s.steps(i, t)?,
                st => bail!("job {i}: timer in state {st:?}"),
            }
        }
    }
    if let Some(i) = s
        .runs
        .iter()
        .position(|r| !matches!(r.state, State::Done | State::Crashed | State::Refused))
    {
        bail!(
            "job {i} ({}) never finished (state {:?}): the policy left it waiting",
            jobs[i].name,
            s.runs[i].state
        );
    }
    let makespan_ns = s.runs.iter().map(|r| r.end).max().unwrap_or(0);
    Ok(Outcome {
        makespan_ns,
        jobs: s
            .runs
            .iter()
            .zip(jobs)
            .map(|(r, j)| JobOutcome {
                name: j.name.clone(),
                end_ns: r.end,
                crashed: r.state != State::Done,
                kernel_ns: r.kernel_ns,
                wait_ns: r.wait_ns,
                device: (r.state == State::Done).then_some(r.dev),
            })
            .collect(),
    })
}

impl<D: Device> Batch<'_, D> {
    /// A worker is free at `t`: it takes the next queued job.
    fn next_job(&mut self, t: u64) -> Result<()> {
        if let Some(i) = self.queue.pop_front() {
            self.runs[i].state = State::Pre;
            self.timers.push(Reverse((t + self.jobs[i].pre_ns, i)));
        }
        Ok(())
    }

    /// `task_begin`: placed now, or waiting.
    fn begin(&mut self, i: usize, t: u64) -> Result<()> {
        let needs = self.jobs[i].needs;
        match self
            .placer
            .task_begin(JobId(i as u64), TaskId(i as u64), needs)
        {
            Ok(Begin::Placed(d)) => self.start_task(i, d, t)?,
            Ok(Begin::Waiting) => {
                self.runs[i].state = State::Waiting;
                self.runs[i].wait_since = t;
            }
            Err(PlaceError::NeverFitsMemory { .. } | PlaceError::NeverFitsBlock { .. }) => {
                self.runs[i].state = State::Refused;
                self.runs[i].end = t;
                self.next_job(t)?;
            }
            Err(e) => bail!("job {i}: {e}"),
        }
        self.drain_placed(t)
    }

    fn drain_placed(&mut self, t: u64) -> Result<()> {
        while let Some((task, d)) = self.placer.poll_placed() {
            let i = task.0 as usize;
            let r = &mut self.runs[i];
            r.wait_ns += t - r.wait_since;
            self.start_task(i, d, t)?;
        }
        Ok(())
    }

    /// The task's memory is allocated on device `d`, then its steps run.
    fn start_task(&mut self, i: usize, d: usize, t: u64) -> Result<()> {
        let r = &mut self.runs[i];
        r.dev = d;
        if self.devs[d].alloc(self.jobs[i].needs.memory).is_err() {
            // Out of memory: the job crashes. This is its one allocation and
            // it has no stream yet, so it leaves nothing behind.
            r.state = State::Crashed;
            r.end = t;
            self.placer.job_end(JobId(i as u64));
            return self.next_job(t);
        }
        r.stream = self.devs[d]
            .create_stream(0, STREAM_QUEUE, false)
            .map_err(|e| anyhow::anyhow!("device {d}: {e}"))?;
        self.owner[d].insert(r.stream, i);
        r.state = State::InTask;
        self.steps(i, t)
    }

    /// Runs the job's next step.
    fn steps(&mut self, i: usize, t: u64) -> Result<()> {
        let job = &self.jobs[i];
        let r = &mut self.runs[i];
        let Some(step) = job.steps.get(r.step) else {
            return self.finish(i, t);
        };
        r.step += 1;
        match step {
            Step::Host(ns) => {
                self.timers.push(Reverse((t + ns, i)));
            }
            Step::Kernels(ks) => {
                if ks.len() > STREAM_QUEUE {
                    bail!(
                        "{}: {} kernels in one burst exceed the stream queue",
                        job.name,
                        ks.len()
                    );
                }
                r.outstanding = ks.len();
                let (d, s) = (r.dev, r.stream);
                for (k, shape) in ks.iter().enumerate() {
                    let tags = Tags {
                        task: i as u64,
                        kernel: k as u32,
                        user: 0,
                    };
                    self.devs[d]
                        .launch(s, KernelLaunch::new(shape.clone(), tags))
                        .map_err(|e| anyhow::anyhow!("device {d}: {e}"))?;
                }
            }
        }
        Ok(())
    }

    /// Frees the task's memory, ends the task and the job.
    fn finish(&mut self, i: usize, t: u64) -> Result<()> {
        let d = self.runs[i].dev;
        self.devs[d].free(self.jobs[i].needs.memory);
        self.placer.task_end(TaskId(i as u64))?;
        self.placer.job_end(JobId(i as u64));
        let r = &mut self.runs[i];
        r.state = State::Done;
        r.end = t;
        self.drain_placed(t)?;
        self.next_job(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multigpu::jobs::{self, Rng};

    fn mix16(spec: &DeviceSpec, ratio: usize) -> Vec<Job> {
        let (l, s) = jobs::rodinia_pools(spec, jobs::GPU_SHARE).unwrap();
        jobs::mix(&l, &s, 16, ratio, &mut Rng(3))
    }

    #[test]
    fn memory_safe_policies_never_crash_and_cg_does() {
        let spec = jobs::p100().unwrap();
        let dev = vec![spec.clone(); 2];
        let w = mix16(&spec, 3);
        for pol in [PlacePolicy::Alg3, PlacePolicy::Alg2, PlacePolicy::SchedGpu] {
            let o = run(&dev, pol, &w, 10).unwrap();
            assert_eq!(o.crashed(), 0, "{pol:?}");
            assert_eq!(o.completed(), 16, "{pol:?}");
            if pol == PlacePolicy::SchedGpu {
                assert!(o.jobs.iter().all(|j| j.device == Some(0)));
            }
        }
        let sa = run(&dev, PlacePolicy::Sa, &w, 2).unwrap();
        assert_eq!(sa.crashed(), 0);
        // CG at 6 jobs per device on 3:1 large jobs: some crash, and every
        // other job still completes.
        let cg = run(&dev, PlacePolicy::Cg { jobs_per_device: 6 }, &w, 12).unwrap();
        assert!(cg.crashed() > 0);
        assert_eq!(cg.crashed() + cg.completed(), 16);
        // Packing by needs beats one job per device (the host phases leave
        // each device mostly idle under SA).
        let mgb = run(&dev, PlacePolicy::Alg3, &w, 10).unwrap();
        assert!(mgb.throughput() > 1.2 * sa.throughput());
    }

    #[test]
    fn sa_runs_a_job_alone_at_its_stand_alone_speed() {
        let spec = jobs::v100().unwrap();
        let w = mix16(&spec, 1);
        let sa = run(&vec![spec.clone(); 4], PlacePolicy::Sa, &w, 4).unwrap();
        for (j, o) in w.iter().zip(&sa.jobs).take(4) {
            let alone = run(
                std::slice::from_ref(&spec),
                PlacePolicy::Sa,
                std::slice::from_ref(j),
                1,
            )
            .unwrap();
            assert_eq!(o.kernel_ns, alone.jobs[0].kernel_ns, "{}", j.name);
        }
    }
}
