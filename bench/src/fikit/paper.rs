//! FIKIT's own figures (fikit.txt §4.3–§4.5: Figs. 14–20, Table 3), each
//! printed beside the paper's, and the runs with a host model per role.

use super::*;

pub(super) fn paper(ctx: &Ctx, args: &FikitArgs, hosts: &[Host], threads: usize) -> Result<()> {
    let n = ctx.models.len();
    let idx = |name: &str| ctx.models.iter().position(|m| m.name == name);
    for &host in hosts {
        println!("\n## host model {} (fikit.txt §4.3–4.5)", host.label());
        // Profiles of every model under this host model (measuring stage).
        let meas: Vec<Result<(Profile, Vec<Time>)>> =
            par(&(0..n).collect::<Vec<_>>(), threads, |&m| {
                ctx.measure(m, host, args.runs)
            });
        let mut profiles = Vec::new();
        let mut meas_jct = Vec::new();
        for r in meas {
            let (p, l) = r?;
            profiles.push(p);
            meas_jct.push(mean(&l));
        }
        // §4.3 Fig. 14 and §4.4 Fig. 15.
        let base: Vec<Result<(f64, f64)>> = par(&(0..n).collect::<Vec<_>>(), threads, |&m| {
            Ok((
                ctx.alone(m, host, "share", &[], args.requests)?,
                ctx.alone(m, host, "fikit", &profiles, args.requests)?,
            ))
        });
        println!(
            "Fig. 14/15: single service JCT overhead vs default (share), {} requests, T = {}",
            args.requests, args.runs
        );
        println!(
            "{:<10} {:>12} {:>12} {:>12} {:>16} {:>12} {:>16}",
            "model",
            "default_us",
            "sharing_us",
            "sharing_%",
            "paper_sharing_%",
            "measuring_%",
            "paper_measuring_%"
        );
        for (m, r) in base.into_iter().enumerate() {
            let (d, f) = r?;
            let mj = meas_jct[m].unwrap_or(f64::NAN);
            println!(
                "{:<10} {:>12.0} {:>12.0} {:>12} {:>16} {:>12} {:>16}",
                ctx.models[m].name,
                d / 1e3,
                f / 1e3,
                overhead_pct(f, d),
                "0.09–4.93",
                overhead_pct(mj, d),
                "34.52–71.78"
            );
        }
        println!(
            "(not modelled: no hook round trip or measuring profiler cost is simulated, \
             so a single service's overhead is not a figure here)"
        );
        let pairs: Vec<(usize, usize)> = PAIRS
            .iter()
            .filter_map(|(h, l)| Some((idx(h)?, idx(l)?)))
            .collect();
        // §4.5.1 Figs. 16, 17: both services continuous.
        let dur = (args.pair_secs * 1e9) as Time;
        let res: Vec<Result<[Option<f64>; 4]>> = par(&pairs, threads, |&(h, l)| {
            let both = |ch: Class, cl: Class| {
                vec![
                    ctx.plan(h, ch, Gen::Continuous),
                    ctx.plan(l, cl, Gen::Continuous),
                ]
            };
            let (sh, fk) = ctx.shared_and_fikit(both, dur, host, (&[], &[]), &profiles)?;
            Ok([
                mean(&sh.clients[0].latencies),
                mean(&fk.clients[0].latencies),
                mean(&sh.clients[1].latencies),
                mean(&fk.clients[1].latencies),
            ])
        });
        println!(
            "Fig. 16/17 (§4.5.1): both services continuous for {} s; JCT speedup of fikit over default sharing",
            args.pair_secs
        );
        println!(
            "{:<22} {:>11} {:>11} {:>9} {:>13} {:>11} {:>11} {:>9} {:>13}",
            "pair H/L",
            "H_share_us",
            "H_fikit_us",
            "H_speedup",
            "paper_H",
            "L_share_us",
            "L_fikit_us",
            "L_speedup",
            "paper_L"
        );
        let f = |v: Option<f64>| v.map_or("-".into(), |x| format!("{:.0}", x / 1e3));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.2}", a / b),
            _ => "-".into(),
        };
        for (&(h, l), r) in pairs.iter().zip(res) {
            let [hs, hf, ls, lf] = r?;
            println!(
                "{:<22} {:>11} {:>11} {:>9} {:>13} {:>11} {:>11} {:>9} {:>13}",
                format!("{}/{}", ctx.models[h].name, ctx.models[l].name),
                f(hs),
                f(hf),
                ratio(hs, hf),
                "1.32–16.41",
                f(ls),
                f(lf),
                ratio(ls, lf),
                "mostly <0.3"
            );
        }
        // §4.5.2 Fig. 18: r high-priority tasks per low-priority task.
        let (h, l) = pairs[0];
        let m = 3u32;
        let ratios = [1u32, 10, 50];
        let alone_h = ctx.alone(h, host, "share", &[], 5)?;
        let alone_l = ctx.alone(l, host, "share", &[], 5)?;
        let res: Vec<Result<Option<f64>>> = par(&ratios, threads, |&r| {
            let out = ctx.run(
                vec![
                    ctx.plan(h, Class::RealTime, Gen::Count { remaining: r * m }),
                    ctx.plan(l, Class::BestEffort, Gen::Count { remaining: m }),
                ],
                Time::MAX / 4,
                "fikit",
                host,
                vec![0, 5],
                ctx.fikit.clone(),
                profiles.clone(),
            )?;
            Ok(mean(&out.clients[1].latencies))
        });
        println!(
            "Fig. 18 (§4.5.2): {}/{}, r·{m} high-priority tasks and {m} low-priority tasks from t = 0; exclusive JCT_L computed, not run: r·JCT_H(alone) + JCT_L(alone), linear in r by this formula",
            ctx.models[h].name, ctx.models[l].name
        );
        println!(
            "{:>5} {:>14} {:>14} {:>9} {:>28}",
            "r", "L_excl_calc_us", "L_fikit_us", "speedup", "paper"
        );
        for (&r, v) in ratios.iter().zip(res) {
            let ex = r as f64 * alone_h + alone_l;
            let fk = v?;
            println!(
                "{:>5} {:>14.0} {:>14} {:>9} {:>28}",
                format!("{r}:1"),
                ex / 1e3,
                f(fk),
                fk.map_or("-".into(), |x| format!("{:.2}", ex / x)),
                "~1 at 1:1, rising linearly"
            );
        }
        // §4.5.3 Figs. 19/20 and §4.5.4 Table 3.
        let period = (args.period_ms * 1e6) as Time;
        let dur = period * u64::from(args.intermittent);
        let res: Vec<Result<[Option<f64>; 3]>> = par(&pairs, threads, |&(h, l)| {
            let pre = |ch: Class, cl: Class| {
                vec![
                    ctx.plan(
                        h,
                        ch,
                        Gen::Periodic {
                            next: period / 2,
                            interval: period,
                        },
                    ),
                    ctx.plan(l, cl, Gen::Continuous),
                ]
            };
            let (sh, fk) = ctx.shared_and_fikit(pre, dur, host, (&[], &[]), &profiles)?;
            // §4.5.4: high continuous, low every period.
            let st = ctx.run(
                vec![
                    ctx.plan(h, Class::RealTime, Gen::Continuous),
                    ctx.plan(
                        l,
                        Class::BestEffort,
                        Gen::Periodic {
                            next: period / 2,
                            interval: period,
                        },
                    ),
                ],
                dur,
                "fikit",
                host,
                vec![0, 5],
                ctx.fikit.clone(),
                profiles.clone(),
            )?;
            let c = cv(&st.clients[1].latencies).map(|(_, _, c)| c);
            Ok([
                mean(&sh.clients[0].latencies),
                mean(&fk.clients[0].latencies),
                c.or(Some(f64::NAN))
                    .filter(|_| !st.clients[1].latencies.is_empty()),
            ])
        });
        println!(
            "Fig. 19 (§4.5.3): high every {} ms ({} requests) over a continuous low; Table 3 (§4.5.4): low every {} ms over a continuous high",
            args.period_ms, args.intermittent, args.period_ms
        );
        println!(
            "{:<22} {:>11} {:>11} {:>9} {:>13} {:>8} {:>13}",
            "pair H/L", "H_share_us", "H_fikit_us", "speedup", "paper", "L_CV", "paper_CV"
        );
        for (&(h, l), r) in pairs.iter().zip(res) {
            let [hs, hf, c] = r?;
            println!(
                "{:<22} {:>11} {:>11} {:>9} {:>13} {:>8} {:>13}",
                format!("{}/{}", ctx.models[h].name, ctx.models[l].name),
                f(hs),
                f(hf),
                ratio(hs, hf),
                "≤15.77 (J<1)",
                c.map_or("-".into(), |x| format!("{x:.3}")),
                "0.095–0.164"
            );
        }
    }
    Ok(())
}

/// §4.5.1 (Fig. 16) and §4.5.3 (Fig. 19) with the two services' frameworks
/// differing: the high service launches under `high`, the low one under
/// `low` (`--low-hosts`). Each model's FIKIT profile is measured under its
/// own role's host model. Under `share` on a device that time-slices
/// contexts (the NVIDIA presets), a high service whose context idles
/// between host-paced launches gives the GPU to a low one that does not
/// idle, and gets it back only at the end of the low one's slice
/// (docs/simulator.md "Contexts").
pub(super) fn mixed_hosts(
    ctx: &Ctx,
    args: &FikitArgs,
    high: Host,
    low: Host,
    threads: usize,
) -> Result<()> {
    let n = ctx.models.len();
    let idx = |name: &str| ctx.models.iter().position(|m| m.name == name);
    let measure = |host: Host| -> Result<Vec<Profile>> {
        par(&(0..n).collect::<Vec<_>>(), threads, |&m| {
            ctx.measure(m, host, args.runs)
        })
        .into_iter()
        .map(|r| r.map(|(p, _)| p))
        .collect()
    };
    let (ph, pl) = (measure(high)?, measure(low)?);
    let gap = |h: Host| h.gap_ns().unwrap_or(0);
    let pairs: Vec<(usize, usize)> = PAIRS
        .iter()
        .filter_map(|(h, l)| Some((idx(h)?, idx(l)?)))
        .collect();
    let pair_setup = |h: usize, l: usize| {
        let mut gaps = vec![gap(high); n];
        gaps[l] = gap(low);
        let mut syncs = vec![high.syncs(); n];
        syncs[l] = low.syncs();
        (gaps, syncs, vec![ph[h].clone(), pl[l].clone()])
    };
    let period = (args.period_ms * 1e6) as Time;
    let dur_b2b = (args.pair_secs * 1e9) as Time;
    let dur_pre = period * u64::from(args.intermittent);
    let res: Vec<Result<[Option<f64>; 6]>> = par(&pairs, threads, |&(h, l)| {
        let (gaps, syncs, profiles) = pair_setup(h, l);
        let both = |ch: Class, cl: Class| {
            vec![
                ctx.plan(h, ch, Gen::Continuous),
                ctx.plan(l, cl, Gen::Continuous),
            ]
        };
        let (sh, fk) = ctx.shared_and_fikit(both, dur_b2b, high, (&gaps, &syncs), &profiles)?;
        let pre = |ch: Class, cl: Class| {
            vec![
                ctx.plan(
                    h,
                    ch,
                    Gen::Periodic {
                        next: period / 2,
                        interval: period,
                    },
                ),
                ctx.plan(l, cl, Gen::Continuous),
            ]
        };
        let (sh2, fk2) = ctx.shared_and_fikit(pre, dur_pre, high, (&gaps, &syncs), &profiles)?;
        Ok([
            mean(&sh.clients[0].latencies),
            mean(&fk.clients[0].latencies),
            mean(&sh2.clients[0].latencies),
            mean(&fk2.clients[0].latencies),
            mean(&sh.clients[1].latencies),
            mean(&fk.clients[1].latencies),
        ])
    });
    println!(
        "\n## high service {}, low service {} (--low-hosts): Fig. 16 both continuous for {} s; Fig. 19 high every {} ms ({} requests) over a continuous low",
        high.label(),
        low.label(),
        args.pair_secs,
        args.period_ms,
        args.intermittent
    );
    println!(
        "{:<22} {:>11} {:>11} {:>9} {:>11} {:>11} {:>9} {:>13} {:>11} {:>11}",
        "pair H/L",
        "16:H_share",
        "16:H_fikit",
        "speedup",
        "19:H_share",
        "19:H_fikit",
        "speedup",
        "paper",
        "16:L_share",
        "16:L_fikit"
    );
    let f = |v: Option<f64>| v.map_or("-".into(), |x| format!("{:.0}", x / 1e3));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "-".into(),
    };
    for (&(h, l), r) in pairs.iter().zip(res) {
        let [s16, f16, s19, f19, ls, lf] = r?;
        println!(
            "{:<22} {:>11} {:>11} {:>9} {:>11} {:>11} {:>9} {:>13} {:>11} {:>11}",
            format!("{}/{}", ctx.models[h].name, ctx.models[l].name),
            f(s16),
            f(f16),
            ratio(s16, f16),
            f(s19),
            f(f19),
            ratio(s19, f19),
            "16.41 / 15.77",
            f(ls),
            f(lf)
        );
    }
    println!("(JCTs in us; paper: Fig. 16 1.32–16.41x, Fig. 19 up to 15.77x)");
    Ok(())
}
