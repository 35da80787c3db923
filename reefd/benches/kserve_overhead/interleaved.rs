//! `priority=1` over gRPC against native RT under one BE load, the
//! requests interleaved (docs/kserve.md).

use super::*;

/// `priority=1` over gRPC against RT over the native socket under the
/// same BE load, robustly (issue 27: "RT latency within 5 % of the same
/// requests over the native socket"): one closed-loop client sends `pairs`
/// pairs of RT requests, one native and one gRPC each, their order
/// alternating from pair to pair, beside 4 closed-loop native BE clients.
/// Both paths thus meet the same load and the same moments of this shared
/// machine, which two phases one after the other do not. Compared by the
/// daemon's own stamps (arrival to completion, what the scheduler gives
/// the request) and by the client's round trip, at the median (robust to
/// the machine's wake-up tails) and at p99.
pub fn rt_interleaved(d: &Daemon, model: &str, pairs: usize) -> anyhow::Result<()> {
    use pb::grpc_inference_service_client::GrpcInferenceServiceClient;
    let load_avg = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("?")
            .to_string()
    };
    println!();
    println!(
        "RT interleaved under BE load: {pairs} rounds (native, gRPC priority=1 over tonic's Channel, the same over a bare HTTP/2 connection, the same request over the lean h2 client), 4 native BE clients; load average {} before",
        load_avg()
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut g = rt.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", d.grpc))?
            .tcp_nodelay(true)
            .connect()
            .await?;
        Ok::<_, anyhow::Error>(GrpcInferenceServiceClient::new(ch))
    })?;
    // The same gRPC client code over a bare HTTP/2 connection: hyper's
    // `SendRequest` in place of tonic's `Channel` (no buffer task, no
    // reconnecting service stack), so that the client library's own share
    // of the gRPC round trip shows beside the daemon's.
    let mut gd = rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(d.grpc.as_str()).await?;
        tcp.set_nodelay(true)?;
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(direct::Stamped(tcp)),
        )
        .await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let origin: tonic::codegen::http::Uri = format!("http://{}", d.grpc).parse()?;
        Ok::<_, anyhow::Error>(GrpcInferenceServiceClient::with_origin(
            direct::Direct(send),
            origin,
        ))
    })?;
    // The same request by a client as lean as the native one: h2 directly,
    // one task, one write per request (`lean`).
    let mut lean = lean::Lean::connect(&d.grpc)?;
    let mut c = Client::connect(&d.socket)?;
    let s = c.register(Priority::Rt, Some("bench-rt"))?;
    let inputs = input().inline();
    let (mut native, mut grpc) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    let (mut bare, mut lean_rt) = ((Vec::new(), Vec::new()), (Vec::new(), Vec::new()));
    let (mut lean_steps, mut lean_io) = (Vec::new(), Vec::new());
    let (mut native_steps, mut grpc_steps) = (Vec::new(), Vec::new());
    let (mut bare_steps, mut bare_io, mut native_io) = (Vec::new(), Vec::new(), Vec::new());
    let mut last_grpc = None;
    let run = || -> anyhow::Result<()> {
        for i in 0..pairs {
            // The four paths in a rotating order.
            for k in 0..4 {
                let turn = (i + k) % 4;
                let t = Instant::now();
                let c0 = reefd::protocol::monotonic_ns();
                if turn == 3 {
                    direct::IO.reset();
                    let r = lean.infer(&grpc_request_rt_stamped(model))?;
                    let (r, c1) = record_grpc(r, (t, c0), &mut lean_rt, &mut lean_steps);
                    lean_io.push(direct::socket_split(&r, c0, c1, direct::IO.take()));
                } else if turn == 2 {
                    direct::IO.reset();
                    let r = rt.block_on(gd.model_infer(grpc_request_rt_stamped(model)))?;
                    let (r, c1) = record_grpc(r.into_inner(), (t, c0), &mut bare, &mut bare_steps);
                    bare_io.push(direct::socket_split(&r, c0, c1, direct::IO.take()));
                } else if turn == 1 {
                    let r = rt.block_on(g.model_infer(grpc_request_rt_stamped(model)))?;
                    let (r, _) = record_grpc(r.into_inner(), (t, c0), &mut grpc, &mut grpc_steps);
                    last_grpc = Some(r);
                } else {
                    let r = c.infer_tensors(s.stream, model, &inputs, &[])?;
                    let c1 = reefd::protocol::monotonic_ns();
                    native.0.push(t.elapsed().as_secs_f64() * 1e6);
                    native.1.push(r.latency_us);
                    let (sent, got) = (c.last_send_monotonic_ns(), c.first_read_monotonic_ns());
                    native_steps.push(steps::native(&r, c0, sent, c1));
                    native_io.push(direct::native_split(c0, sent, got, c1));
                }
            }
        }
        Ok(())
    };
    let (r, be) = beside_be_load(d, model, run)?;
    r?;
    println!(
        "  ({be} best-effort requests served beside them; load average {} after)",
        load_avg()
    );
    println!(
        "{:<24} {:>10} {:>10} {:>10} {:>12} {:>12} {:>12}",
        "path", "p50 us", "mean us", "p99 us", "reefd p50", "reefd mean", "reefd p99"
    );
    let mut sums = Vec::new();
    for (name, (rtt, own)) in [
        ("native RT", &native),
        ("gRPC priority=1", &grpc),
        ("gRPC, bare h2 client", &bare),
        ("gRPC, lean h2 client", &lean_rt),
    ] {
        let (a, b) = (
            summarize(rtt.iter().copied()),
            summarize(own.iter().copied()),
        );
        println!(
            "{:<24} {:>10.1} {:>10.1} {:>10.1} {:>12.1} {:>12.1} {:>12.1}",
            name, a.p50_us, a.mean_us, a.p99_us, b.p50_us, b.mean_us, b.p99_us
        );
        sums.push((a, b));
    }
    let n = &sums[0];
    for (name, g) in [
        ("gRPC", &sums[1]),
        ("gRPC, bare h2", &sums[2]),
        ("gRPC, lean h2", &sums[3]),
    ] {
        println!(
            "  {name}/native: reefd's own p50 {:.3}, mean {:.3}, p99 {:.3}; client p50 {:.3}, mean {:.3}, p99 {:.3}; client added p50 {:+.1} us, p99 {:+.1} us",
            g.1.p50_us / n.1.p50_us,
            g.1.mean_us / n.1.mean_us,
            g.1.p99_us / n.1.p99_us,
            g.0.p50_us / n.0.p50_us,
            g.0.mean_us / n.0.mean_us,
            g.0.p99_us / n.0.p99_us,
            g.0.p50_us - n.0.p50_us,
            g.0.p99_us - n.0.p99_us
        );
    }
    steps::breakdown(
        &native_steps,
        &[
            ("gRPC priority=1", &grpc_steps),
            ("gRPC, bare h2 client", &bare_steps),
            ("gRPC, lean h2 client", &lean_steps),
        ],
        last_grpc.as_ref(),
        &|| grpc_request_rt_stamped(model),
    );
    direct::show_socket("bare h2", &native_io, &bare_io);
    direct::show_socket("lean h2", &native_io, &lean_io);
    Ok(())
}

/// Records one gRPC answer of the interleaved phase, the moment its call
/// returned: the round trip since `t` (and `c0` on CLOCK_MONOTONIC), the
/// daemon's own stamp and the steps; returns the answer and that moment.
fn record_grpc(
    r: pb::ModelInferResponse,
    (t, c0): (Instant, u64),
    (rtt, own): &mut (Vec<f64>, Vec<f64>),
    steps_out: &mut Vec<steps::Steps>,
) -> (pb::ModelInferResponse, u64) {
    let c1 = reefd::protocol::monotonic_ns();
    rtt.push(t.elapsed().as_secs_f64() * 1e6);
    own.push(reef_latency(&r));
    steps_out.push(steps::grpc(&r, c0, c1));
    (r, c1)
}
