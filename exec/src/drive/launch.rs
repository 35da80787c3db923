//! The interpreter's launches of several kernels at once: padded launches
//! and their rests (REEF §5.1, Fig. 12), Aker's fused launches and the
//! rests of split kernels (Aker §5.4, §8.2).

use super::*;

impl<D: Device> Driver<D> {
    /// Padded launches and the rest of partly padded kernels (REEF §5.1,
    /// Fig. 12) and Aker's fused launches and the rest of split kernels
    /// (Aker §5.4, §8.2), each component with its own task's buffers.
    pub(super) fn apply_launch(
        &mut self,
        a: DkpAction,
        work: &dyn Work,
        out: &mut Vec<Outcome>,
    ) -> Result<(), (String, String)> {
        let policy = self.run.policy.clone();
        match a {
            DkpAction::Padded(p) => {
                let (req, k) = (p.tag.req, p.tag.kernel as usize);
                let what = || format!("padded launch of request {} kernel {k}", req.0);
                let model = work
                    .model_of(req)
                    .ok_or_else(|| (what(), "unknown request".to_string()))?;
                self.host_launched(req, p.tag.kernel, model);
                let rt_base = self.shape(model, k).map_err(|e| (what(), e))?;
                let s0 = self.stream(p.stream).map_err(|e| (what(), e))?;
                let Some(pad) = self.pad.as_mut() else {
                    return Err((what(), format!("policy {policy} pads without profiles")));
                };
                let shapes = &self.run.shapes;
                let be_shape = |x: &reef_sched::dkp::BePart| {
                    shapes[x.model.0 as usize][x.tag.kernel as usize].clone()
                };
                let be_bufs =
                    |x: &reef_sched::dkp::BePart| work.buffers(x.tag.req, x.tag.kernel as usize);
                let queued: Vec<(RequestId, u32)> = std::iter::once((req, p.tag.kernel))
                    .chain(p.parts.iter().map(|x| (x.tag.req, x.tag.kernel)))
                    .collect();
                let rt_bufs = work.buffers(req, k);
                let (p_kernel, be_parts) = (p.tag.kernel, p.parts.len());
                let issued = pad
                    .launch(&mut self.dev, s0, p, &rt_base, &be_shape, rt_bufs, &be_bufs)
                    .map_err(|e| (what(), format!("{e:#}")))?;
                for (req, kernel) in queued {
                    out.push(Outcome::Queued {
                        req,
                        kernel,
                        issued,
                    });
                }
                out.push(Outcome::Launched(LaunchKind::Padded {
                    req,
                    kernel: p_kernel,
                    be_parts,
                }));
            }
            DkpAction::Rest {
                stream,
                tag,
                version,
                blocks,
            } => {
                let (req, k) = (tag.req, tag.kernel as usize);
                let what = || {
                    format!(
                        "rest of request {} kernel {k} on stream {}",
                        req.0, stream.0
                    )
                };
                let model = work
                    .model_of(req)
                    .ok_or_else(|| (what(), "unknown request".to_string()))?;
                let base = self.shape(model, k).map_err(|e| (what(), e))?;
                let tags = Tags {
                    task: req.0,
                    kernel: tag.kernel,
                    user: 0,
                };
                let l = if self.fuse.is_some() {
                    // Aker: the blocks a split left, in the kernel's own shape.
                    KernelLaunch::new(base, tags).with_blocks(blocks)
                } else if let Some(pad) = self.pad.as_mut() {
                    pad.rest(&base, model as u32, version, tags, blocks)
                        .map_err(|e| (what(), format!("{e:#}")))?
                } else {
                    return Err((
                        what(),
                        format!("policy {policy} split a kernel without an executor"),
                    ));
                };
                let (r, w) = work.buffers(req, k);
                let s = self.stream(stream).map_err(|e| (what(), e))?;
                let issued = Instant::now();
                self.dev
                    .launch(s, l.with_buffers(r, w))
                    .map_err(|e| (what(), e))?;
                out.push(Outcome::Queued {
                    req,
                    kernel: tag.kernel,
                    issued,
                });
                out.push(Outcome::Launched(LaunchKind::Rest));
            }
            DkpAction::Fused(f) => {
                let (lk, bk) = (f.lc.kernel as usize, f.be.kernel as usize);
                let what = || {
                    format!(
                        "fused launch of request {} kernel {lk} with request {} kernel {bk}",
                        f.lc.req.0, f.be.req.0
                    )
                };
                let (Some(lm), Some(bm)) = (work.model_of(f.lc.req), work.model_of(f.be.req))
                else {
                    return Err((what(), "unknown request".to_string()));
                };
                self.host_launched(f.lc.req, f.lc.kernel, lm);
                let ls = self.shape(lm, lk).map_err(|e| (what(), e))?;
                let bs = self.shape(bm, bk).map_err(|e| (what(), e))?;
                let s0 = self.stream(f.stream).map_err(|e| (what(), e))?;
                let Some(fuse) = self.fuse.as_mut() else {
                    return Err((what(), format!("policy {policy} fused without Aker")));
                };
                let issued = Instant::now();
                fuse.launch(
                    &mut self.dev,
                    s0,
                    &f,
                    (&ls, work.buffers(f.lc.req, lk)),
                    (&bs, work.buffers(f.be.req, bk)),
                )
                .map_err(|e| (what(), e.to_string()))?;
                for (req, kernel) in [(f.lc.req, f.lc.kernel), (f.be.req, f.be.kernel)] {
                    out.push(Outcome::Queued {
                        req,
                        kernel,
                        issued,
                    });
                }
                out.push(Outcome::Launched(LaunchKind::Fused));
            }
            DkpAction::Core(a) => return self.apply_core(a, work, out),
        }
        Ok(())
    }
}
