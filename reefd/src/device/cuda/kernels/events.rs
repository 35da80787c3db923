//! The CUDA device's events and faults (see kernels.rs's module doc):
//! completions observed by `cuEventQuery`, each kernel that may have seen
//! the preempt flag judged by its instance's execution index (REEF §4.3,
//! Fig. 8: the check at every block's entry; §4.4: the index names the
//! interrupted kernel), and a failed query taken as the context's fault,
//! which ends the requests that hold buffers on it and rebuilds the
//! context.

use super::*;

impl CudaKernels {
    /// Reports the kernels of stream `si` CUDA has finished, at `now`. A
    /// failed query is the context's fault: returned with the driver's
    /// words.
    pub(super) fn poll_stream(
        &mut self,
        si: usize,
        out: &mut Vec<DeviceEvent>,
    ) -> Result<(), CudaError> {
        self.dev.current()?;
        loop {
            let st = &self.streams[si];
            let Some(f) = st.inflight.front() else {
                return Ok(());
            };
            // SAFETY: an event of ours.
            let r = unsafe { sys::cuEventQuery(f.ev) };
            if r == CUresult::CUDA_ERROR_NOT_READY {
                return Ok(());
            }
            check("cuEventQuery", r)?;
            // (passed the flag check, ran every block)
            let (passed, ran, idx) = if f.flagged {
                let mut b = [0u8; 4];
                dtoh(&mut b, st.instances[&f.model][f.slot].inst.index)?;
                let idx = u32::from_le_bytes(b);
                (idx >= f.exec, idx > f.exec, idx)
            } else {
                (true, true, 0)
            };
            let st = &mut self.streams[si];
            let f = st.inflight.pop_front().expect("front");
            self.free_events.push(f.ev);
            let stream = StreamId(si as u32);
            if passed && !f.started {
                out.push(DeviceEvent {
                    time: self.now,
                    stream,
                    launch: f.id,
                    tags: f.tags,
                    kind: EventKind::Started,
                });
            }
            if ran && f.flagged {
                // The index went past this kernel: a later kernel of the
                // instance passed its check (and may have run partly
                // under the flag). Its start is reported first, so the
                // scheduler counts this completion and restores from the
                // kernel the index names (REEF §4.4), not from this one:
                // re-running this one after its successor partly ran
                // would read what the successor may have overwritten.
                for n in st.inflight.iter_mut() {
                    if n.started || n.slot != f.slot || n.model != f.model || n.exec > idx {
                        continue;
                    }
                    n.started = true;
                    out.push(DeviceEvent {
                        time: self.now,
                        stream,
                        launch: n.id,
                        tags: n.tags,
                        kind: EventKind::Started,
                    });
                }
            }
            out.push(DeviceEvent {
                time: self.now,
                stream,
                launch: f.id,
                tags: f.tags,
                kind: if ran {
                    EventKind::Completed
                } else {
                    EventKind::Evicted
                },
            });
            if let Some(next) = st.inflight.front_mut().filter(|n| !n.started && !n.flagged) {
                next.started = true;
                out.push(DeviceEvent {
                    time: self.now,
                    stream,
                    launch: next.id,
                    tags: next.tags,
                    kind: EventKind::Started,
                });
            }
            let m = &self.dev.models[&f.model];
            if ran && f.tags.kernel as usize + 1 == m.files.launches.len() {
                if let Some(data) = self.attached.get(&f.tags.task) {
                    let inst = &self.streams[si].instances[&f.model][f.slot].inst;
                    let got = copy_outputs(data, inst, &f.model);
                    self.outputs.insert(f.tags.task, got);
                    continue;
                }
                let bytes =
                    read_outputs(&m.files, &self.streams[si].instances[&f.model][f.slot].inst)?;
                let seed = f.tags.task % INPUT_SEEDS;
                let ok = self.references.get(&(f.model.clone(), seed)) == Some(&bytes);
                self.verified.insert(f.tags.task, ok);
            }
        }
    }

    /// A fault poisoned the context (module doc): every request holding
    /// buffers on it ends with `why`; its kernels in flight are reported
    /// done now (nothing of them is left: the context is destroyed); the
    /// context is rebuilt with its models and the streams are made again.
    pub(super) fn fault(&mut self, action: &str, why: String, out: &mut Vec<DeviceEvent>) {
        tracing::error!(
            "{}: {action} failed: {why}: the context is lost; its requests fail, the context is \
             rebuilt with its models",
            self.dev.device()
        );
        self.errors.push((action.to_string(), why.clone()));
        for (si, st) in self.streams.iter_mut().enumerate() {
            let stream = StreamId(si as u32);
            for f in st.inflight.drain(..) {
                self.failed.insert(f.tags.task, why.clone());
                for kind in [EventKind::Started, EventKind::Completed] {
                    if kind == EventKind::Started && f.started {
                        continue;
                    }
                    out.push(DeviceEvent {
                        time: self.now,
                        stream,
                        launch: f.id,
                        tags: f.tags,
                        kind,
                    });
                }
            }
            // Instances (buffers, modules) die with the context: dropped
            // without calls.
            for slot in st.instances.drain().flat_map(|(_, v)| v) {
                if let Some(t) = slot.task {
                    self.failed.insert(t, why.clone());
                }
            }
        }
        for t in self.failed.keys() {
            self.verified.remove(t);
        }
        // Events, streams and modules of the old context are dead.
        self.free_events.clear();
        let t0 = std::time::Instant::now();
        let r = self.dev.rebuild().and_then(|()| {
            for st in &mut self.streams {
                st.cu = Self::new_stream(&self.dev, st.class)?;
            }
            Ok(())
        });
        match r {
            Ok(()) => {
                self.rebuilds += 1;
                tracing::warn!(
                    "{}: context rebuilt in {:.0} us ({} models reloaded)",
                    self.dev.device(),
                    t0.elapsed().as_secs_f64() * 1e6,
                    self.dev.models.len()
                );
            }
            Err(e) => {
                tracing::error!("{}: rebuilding the context: {e}", self.dev.device());
                self.errors
                    .push(("rebuild the context".into(), e.to_string()));
            }
        }
    }
}
