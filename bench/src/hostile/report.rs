//! The printed report.

use super::*;

pub(super) fn print_tally_table(r: &Round) {
    println!(
        "{:<10} {:>6} {:>6} {:>8} {:>11} {:>10} {:>8}  answers",
        "clients", "conns", "failed", "sent", "bytes", "unanswered", "closed"
    );
    for (name, t) in [
        ("benign", &r.benign),
        ("oversized", &r.oversized),
        ("slow", &r.slow),
        ("killed", &r.killed),
        ("garbage", &r.garbage),
    ] {
        let answers: Vec<String> = t
            .answers
            .iter()
            .filter(|(k, _)| !k.starts_with('['))
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        println!(
            "{:<10} {:>6} {:>6} {:>8} {:>11} {:>10} {:>8}  {}",
            name,
            t.connections,
            t.connect_failed,
            t.sent,
            t.bytes,
            t.unanswered,
            t.closed_by_daemon,
            answers.join(", ")
        );
        for (k, v) in &t.errors {
            println!("{:<10}   error x{v}: {k}", "");
        }
    }
    let g: Vec<String> = r
        .garbage
        .answers
        .iter()
        .filter(|(k, _)| k.starts_with('['))
        .map(|(k, v)| format!("{} x{v}", k.trim_matches(|c| c == '[' || c == ']')))
        .collect();
    if !g.is_empty() {
        println!("garbage answered: {}", g.join("; "));
    }
}

pub(super) fn print_table(r: &Report) {
    println!("reef-bench hostile: {}", r.command);
    println!(
        "daemon pid {} ({}), max_connections {}, open-file limit {}; bench's open-file limit {} (hard {})",
        r.daemon_pid,
        if r.daemon_started_here {
            "started here"
        } else {
            "attached"
        },
        r.max_connections
            .map_or("as configured".into(), |m| m.to_string()),
        r.daemon_nofile.as_deref().unwrap_or("?"),
        r.bench_nofile.0,
        r.bench_nofile.1
    );
    println!(
        "connections per round: {} ({} benign; hostile: {} oversized names, {} slow senders, {} killed mid-frame, {} garbage); rounds: {}",
        r.connections,
        r.benign,
        r.hostile[0],
        r.hostile[1],
        r.hostile[2],
        r.hostile[3],
        r.rounds.len()
    );
    println!();
    println!("RT client (closed loop, {}), latency from its send to the reply, us (daemon: arrival to completion; send->k0: the client's send to the first kernel in the device queue):", r.rt_client_sched);
    println!(
        "{:<12} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9}  {:>11} {:>10}  {:>13} {:>12}  loadavg",
        "phase",
        "done",
        "failed",
        "mean",
        "p50",
        "p99",
        "max",
        "daemon mean",
        "daemon p99",
        "send->k0 p50",
        "send->k0 p99",
    );
    let mut rows: Vec<(String, &RtPhase, &str)> =
        vec![("quiet".into(), &r.quiet, r.loadavg_quiet.as_str())];
    for (i, rd) in r.rounds.iter().enumerate() {
        rows.push((
            format!("loaded #{}", i + 1),
            &rd.loaded,
            rd.loadavg.as_str(),
        ));
    }
    rows.push(("quiet again".into(), &r.quiet_after, ""));
    for (name, p, la) in rows {
        println!(
            "{:<12} {:>6} {:>6} {:>9.0} {:>9.0} {:>9.0} {:>9.0}  {:>11.0} {:>10.0}  {:>13.1} {:>12.1}  {}",
            name,
            p.completed,
            p.failed,
            p.client_us.mean,
            p.client_us.p50,
            p.client_us.p99,
            p.client_us.max,
            p.daemon_us.mean,
            p.daemon_us.p99,
            p.send_to_first_kernel_us.p50,
            p.send_to_first_kernel_us.p99,
            la
        );
    }
    println!("after completion, us (mean / p99): done->seen: the daemon catching the device up past the last kernel; seen->written: the answer waiting for its connection's writer; written->read: the socket and the client's wake-up");
    for (name, p) in [("quiet", &r.quiet)]
        .into_iter()
        .chain(r.rounds.iter().map(|rd| ("loaded", &rd.loaded)))
        .chain([("quiet again", &r.quiet_after)])
    {
        println!(
            "{:<12} done->seen {:>7.1} / {:>7.1}   seen->written {:>7.1} / {:>7.1}   written->read {:>7.1} / {:>7.1}",
            name,
            p.done_to_seen_us.mean,
            p.done_to_seen_us.p99,
            p.seen_to_written_us.mean,
            p.seen_to_written_us.p99,
            p.written_to_read_us.mean,
            p.written_to_read_us.p99
        );
    }
    println!(
        "loaded #1 / quiet: mean {:.3}, p99 {:.3} -> {} (daemon's own latency: mean {:.3}, p99 {:.3})",
        r.ratio_mean,
        r.ratio_p99,
        if r.within_5_percent {
            "within 5 %"
        } else {
            "NOT within 5 %"
        },
        r.daemon_ratio_mean,
        r.daemon_ratio_p99
    );
    println!();
    println!("daemon process (/proc/{}):", r.daemon_pid);
    println!(
        "{:<26} {:>12} {:>8} {:>8} {:>16}",
        "", "RSS KiB", "fds", "threads", "open (daemon)"
    );
    println!(
        "{:<26} {:>12} {:>8} {:>8}",
        "before the load", r.before.rss_kib, r.before.fds, r.before.threads
    );
    for (i, rd) in r.rounds.iter().enumerate() {
        println!(
            "{:<26} {:>12} {:>8} {:>8} {:>16}",
            format!("round {} peak", i + 1),
            rd.peak.max_rss_kib,
            rd.peak.max_fds,
            rd.peak.max_threads,
            rd.connections_open_at_peak
                .map_or("?".into(), |c| c.to_string())
        );
        match &rd.after {
            Some(s) => println!(
                "{:<26} {:>12} {:>8} {:>8}",
                format!("round {} after (+{:.1} s)", i + 1, rd.seconds_to_settle),
                s.rss_kib,
                s.fds,
                s.threads
            ),
            None => println!("round {} after: the daemon is gone", i + 1),
        }
    }
    println!(
        "leak check: fds {:+}, RSS {:+} KiB since before, {} KiB over the later rounds -> {}",
        r.fd_leak.unwrap_or(0),
        r.rss_growth_kib.unwrap_or(0),
        r.rss_growth_later_rounds_kib
            .map_or("-".into(), |g| format!("{g:+}")),
        if r.leak_ok { "ok" } else { "LEAK or gone" }
    );
    if let Some(n) = &r.non_reader {
        println!(
            "non-reader probe: {} frames, {} MiB sent, answers never read{}: RSS {} KiB before, {} KiB open (+{} MiB), {} KiB after close",
            n.frames,
            n.bytes >> 20,
            if n.backpressure { ", the daemon stopped reading (backpressure)" } else { ", all read by the daemon" },
            n.rss_before_kib,
            n.rss_open_kib,
            n.rss_open_kib.saturating_sub(n.rss_before_kib) / 1024,
            n.rss_closed_kib
        );
    }
    for (i, rd) in r.rounds.iter().enumerate() {
        println!();
        println!("round {}:", i + 1);
        print_tally_table(rd);
    }
    println!();
    match &r.hello_after {
        Ok(h) => println!("hello after the load: ok ({h})"),
        Err(e) => println!("hello after the load: FAILED: {e}"),
    }
    println!(
        "connections the daemon counts after the load: {}",
        r.daemon_connections_after
            .map_or("?".into(), |c| c.to_string())
    );
    if let Some(s) = &r.stats_delta {
        println!(
            "daemon counters over the load: requests {}, bad requests {}, tasks submitted {} / completed {} / failed {}, corrupted outputs {}, device errors {}",
            s.requests, s.bad_requests, s.tasks_submitted, s.tasks_completed, s.tasks_failed, s.corrupted_outputs, s.device_errors
        );
    }
    println!("daemon: {}", r.daemon_exit);
    for w in &r.daemon_log_warnings {
        println!("daemon log: {w}");
    }
    if r.problems.is_empty() {
        println!("no problems seen");
    }
    for p in &r.problems {
        println!("PROBLEM: {p}");
    }
}
