//! A plain in-order executor: every task of every stream runs to completion,
//! one kernel at a time, in arrival order, with each kernel taking its
//! measured share of the model's stand-alone latency (REEF §6.2 measures the
//! stand-alone latency; models/README.md documents `model_latency` and
//! `total_latency`). This is *not* a scheduler and not REEF: it has no
//! priorities and cannot preempt. It serves the daemon when no scheduler
//! engine is available and lets the server be tested on its own.

use super::{Engine, EngineError, EngineEvent, EngineInfo, EngineModel, Nanos, TaskProgress};
use crate::protocol::{Priority, TaskState};
use std::collections::{BTreeMap, HashMap, VecDeque};

struct ModelTiming {
    /// Duration of each kernel, in launch order.
    kernel_ns: Vec<u64>,
}

impl ModelTiming {
    fn new(m: &reef_model::Model) -> ModelTiming {
        let n = m.kernels.len().max(1) as u64;
        let alone: Vec<u64> = m
            .kernels
            .iter()
            .map(|k| k.profile.as_ref().map(|p| p.total_latency_ns).unwrap_or(0))
            .collect();
        let sum: u64 = alone.iter().sum();
        let kernel_ns = match m.measured_latency_ns() {
            // Back-to-back launches hide the per-launch overhead included in
            // each kernel's stand-alone figure: scale the kernels so that
            // they add up to the measured model latency.
            Some(total) if sum > 0 => alone
                .iter()
                .map(|&a| ((a as u128 * total as u128) / sum as u128) as u64)
                .collect(),
            Some(total) => vec![total / n; m.kernels.len()],
            // No profile: 10 us a kernel, a stated placeholder.
            None => vec![10_000; m.kernels.len()],
        };
        ModelTiming { kernel_ns }
    }
}

struct Job {
    task: u64,
    stream: u64,
    model: String,
}

struct Running {
    job: Job,
    kernel: usize,
    kernel_end: Nanos,
}

/// See the module documentation.
#[derive(Default)]
pub struct InOrderExecutor {
    models: HashMap<String, ModelTiming>,
    streams: BTreeMap<u64, Priority>,
    queue: VecDeque<Job>,
    running: Option<Running>,
}

impl InOrderExecutor {
    pub fn new() -> Self {
        Self::default()
    }

    fn start_next(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        while self.running.is_none() {
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            let Some(t) = self.models.get(&job.model) else {
                out.push(EngineEvent::TaskRejected {
                    task: job.task,
                    reason: format!("model {} is not loaded", job.model),
                });
                continue;
            };
            if t.kernel_ns.is_empty() {
                out.push(EngineEvent::TaskDone {
                    task: job.task,
                    at: now,
                    verified: None,
                });
                continue;
            }
            out.push(EngineEvent::FirstKernelQueued {
                task: job.task,
                at: now,
                issued: std::time::Instant::now(),
            });
            out.push(EngineEvent::KernelsLaunched { count: 1 });
            self.running = Some(Running {
                kernel_end: now + t.kernel_ns[0],
                job,
                kernel: 0,
            });
        }
    }
}

impl Engine for InOrderExecutor {
    fn info(&self) -> EngineInfo {
        EngineInfo {
            name: "in-order executor (no scheduler: FIFO, no preemption)".into(),
            policy: "fifo".into(),
            preemption_levels: vec![],
        }
    }

    fn set_policy(&mut self, _now: Nanos, policy: &str) -> Result<(), EngineError> {
        Err(EngineError::Unsupported(format!(
            "the in-order executor has no scheduling policies; {policy:?} needs the reef-sched engine"
        )))
    }

    fn add_model(&mut self, model: EngineModel) -> Result<(), EngineError> {
        self.models
            .insert(model.name.clone(), ModelTiming::new(&model.model));
        Ok(())
    }

    fn remove_model(&mut self, name: &str) {
        self.models.remove(name);
    }

    fn open_stream(&mut self, stream: u64, priority: Priority) -> Result<(), EngineError> {
        self.streams.insert(stream, priority);
        Ok(())
    }

    fn close_stream(&mut self, now: Nanos, stream: u64, out: &mut Vec<EngineEvent>) -> Vec<u64> {
        self.streams.remove(&stream);
        let mut dropped: Vec<u64> = Vec::new();
        self.queue.retain(|j| {
            if j.stream == stream {
                dropped.push(j.task);
                false
            } else {
                true
            }
        });
        if self
            .running
            .as_ref()
            .is_some_and(|r| r.job.stream == stream)
        {
            if let Some(r) = self.running.take() {
                dropped.push(r.job.task);
            }
            self.start_next(now, out);
        }
        dropped
    }

    fn submit(
        &mut self,
        now: Nanos,
        task: u64,
        stream: u64,
        model: &str,
        out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        if !self.streams.contains_key(&stream) {
            return Err(EngineError::NotFound(format!("no stream {stream}")));
        }
        if !self.models.contains_key(model) {
            return Err(EngineError::NotFound(format!(
                "model {model} is not loaded"
            )));
        }
        self.queue.push_back(Job {
            task,
            stream,
            model: model.to_string(),
        });
        self.start_next(now, out);
        Ok(())
    }

    fn preempt(
        &mut self,
        _now: Nanos,
        _stream: u64,
        _out: &mut Vec<EngineEvent>,
    ) -> Result<u64, EngineError> {
        Err(EngineError::Unsupported(
            "the in-order executor cannot preempt; it serves only until the reef-sched engine is available".into(),
        ))
    }

    fn resume(
        &mut self,
        _now: Nanos,
        _stream: u64,
        _out: &mut Vec<EngineEvent>,
    ) -> Result<(), EngineError> {
        Err(EngineError::Unsupported(
            "the in-order executor cannot preempt, so there is nothing to resume".into(),
        ))
    }

    fn advance(&mut self, now: Nanos, out: &mut Vec<EngineEvent>) {
        while let Some(r) = self.running.as_mut() {
            if r.kernel_end > now {
                return;
            }
            let t = &self.models[&r.job.model];
            let end = r.kernel_end;
            if r.kernel + 1 < t.kernel_ns.len() {
                r.kernel += 1;
                r.kernel_end = end + t.kernel_ns[r.kernel];
                out.push(EngineEvent::KernelsLaunched { count: 1 });
            } else {
                let task = r.job.task;
                self.running = None;
                out.push(EngineEvent::TaskDone {
                    task,
                    at: end,
                    verified: None,
                });
                self.start_next(end, out);
            }
        }
    }

    fn next_event_time(&self) -> Option<Nanos> {
        self.running.as_ref().map(|r| r.kernel_end)
    }

    fn queue_depths(&self, stream: u64) -> (usize, usize) {
        let mut host = 0;
        for j in self.queue.iter().filter(|j| j.stream == stream) {
            host += self.models.get(&j.model).map_or(0, |t| t.kernel_ns.len());
        }
        let mut device = 0;
        if let Some(r) = self.running.as_ref().filter(|r| r.job.stream == stream) {
            host += self.models[&r.job.model].kernel_ns.len() - r.kernel - 1;
            device = 1;
        }
        (host, device)
    }

    fn task_progress(&self, task: u64) -> Option<TaskProgress> {
        if let Some(r) = self.running.as_ref().filter(|r| r.job.task == task) {
            return Some(TaskProgress {
                state: TaskState::Running,
                next_kernel: r.kernel + 1,
                kernels: self.models[&r.job.model].kernel_ns.len(),
            });
        }
        self.queue
            .iter()
            .find(|j| j.task == task)
            .map(|j| TaskProgress {
                state: TaskState::Queued,
                next_kernel: 0,
                kernels: self.models.get(&j.model).map_or(0, |t| t.kernel_ns.len()),
            })
    }
}
