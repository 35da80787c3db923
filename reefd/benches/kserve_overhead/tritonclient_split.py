"""Where a tritonclient round trip goes (issue 27: "report the wall time a
tritonclient round trip spends in reefd, by the daemon's own stamps,
against the time in the client library").

Run by `cargo bench -p reefd --bench kserve_overhead` (its `tritonclient`
phase), which starts reefd, loads the model and puts 4 native best-effort
clients beside this script. One closed-loop client here sends RT requests
by three paths in a rotating order, so that all three meet the same load
and the same moments of the machine:

- native: reef_client (python/reef_client) on the Unix socket, an RT stream;
- gRPC: tritonclient.grpc (grpcio) with priority=1;
- HTTP: tritonclient.http with priority=1, binary tensors both ways.

Every stamp is CLOCK_MONOTONIC in ns: Python's time.monotonic_ns() and the
daemon's stamps are on one clock. Per request:

- round trip: the library call, as the user's code sees it;
- in reefd: from the daemon's read of the request to its answer ready to
  write. gRPC: reef_read_ns (the connection's last read before the call)
  to reef_built_ns (the response built, before it is encoded), asked with
  the request parameter reef_timeline. HTTP: the same two stamps. Native:
  the arrival (done_ns less latency_us) to written_ns (its writer took
  the answer);
- outside: round trip less in reefd: the client library (encode, its
  threads, decode), both ends of the loopback socket, the framing the
  daemon writes after the stamp, the wake-ups;
- scheduled: the daemon's own latency_us, arrival to completion (what the
  scheduler gave the request).

Usage: tritonclient_split.py SOCKET GRPC_ADDR HTTP_ADDR MODEL ROUNDS
"""

import sys
import time
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

# The project's native client, python/reef_client, beside this checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "python"))
from reef_client import Client  # noqa: E402


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


# The fronts' stamps (docs/kserve.md, "Scheduling from the request"), in
# the order a request passes them, and the steps between them.
FRONT = ["reef_read_ns", "reef_entered_ns", "reef_called_ns", "reef_done_ns",
         "reef_seen_ns", "reef_answered_ns", "reef_built_ns"]
FRONT_STEPS = ["read to handler (decode)", "front: request to runtime",
               "runtime: to the task's completion", "done to seen",
               "seen to front (handoff)", "front: answer to response"]
NATIVE_STEPS = ["arrival to done", "done to seen", "seen to writer (handoff)"]


def between(t):
    return [b - a for a, b in zip(t, t[1:])]


def main():
    if len(sys.argv) != 6 or not sys.argv[5].isdigit():
        sys.exit(__doc__)
    sock, grpc_addr, http_addr, model, rounds = sys.argv[1:6]
    rounds = int(rounds)
    native = Client(sock)
    info = native.model(model)
    if len(info["inputs"]) != 1 or info["inputs"][0]["dtype"] != "float32":
        sys.exit(f"the split sends one float32 input; {model} declares {info['inputs']}")
    x_info = info["inputs"][0]
    x = np.full(x_info["shape"], 0.5, dtype=np.float32)
    stream = native.register("rt", label="tritonclient-split")
    g = grpcclient.InferenceServerClient(url=grpc_addr)
    h = httpclient.InferenceServerClient(url=http_addr)
    outs = [o["name"] for o in info["outputs"]]

    def via_native():
        t0 = time.monotonic_ns()
        r, o = native.infer(stream, model, {x_info["name"]: x})
        t1 = time.monotonic_ns()
        tl = r["timeline"]
        arrival = tl["done_ns"] - int(r["latency_us"] * 1e3)
        assert set(o) == set(outs), f"native answer lacks outputs: {sorted(o)}"
        steps = between([arrival, tl["done_ns"], tl["seen_ns"], tl["written_ns"]])
        return t1 - t0, tl["written_ns"] - arrival, r["latency_us"], steps

    def via_grpc():
        i = grpcclient.InferInput(x_info["name"], list(x.shape), "FP32")
        i.set_data_from_numpy(x)
        t0 = time.monotonic_ns()
        r = g.infer(model, [i], priority=1, parameters={"reef_timeline": True})
        t1 = time.monotonic_ns()
        p = r.get_response().parameters
        for o in outs:
            assert r.as_numpy(o) is not None, f"gRPC answer lacks output {o}"
        t = [p[k].uint64_param for k in FRONT]
        return t1 - t0, t[-1] - t[0], p["reef_latency_us"].double_param, between(t)

    def via_http():
        i = httpclient.InferInput(x_info["name"], list(x.shape), "FP32")
        i.set_data_from_numpy(x, binary_data=True)
        want = [httpclient.InferRequestedOutput(o, binary_data=True) for o in outs]
        t0 = time.monotonic_ns()
        r = h.infer(model, [i], outputs=want, priority=1, parameters={"reef_timeline": True})
        t1 = time.monotonic_ns()
        p = r.get_response()["parameters"]
        for o in outs:
            assert r.as_numpy(o) is not None, f"HTTP answer lacks output {o}"
        t = [int(p[k]) for k in FRONT]
        return t1 - t0, t[-1] - t[0], p["reef_latency_us"], between(t)

    paths = [("native RT (reef_client)", via_native),
             ("gRPC priority=1 (tritonclient)", via_grpc),
             ("HTTP binary priority=1 (tritonclient)", via_http)]
    # Warm each path (connections, first allocations); not counted.
    for _ in range(20):
        for _, f in paths:
            f()
    got = {name: [] for name, _ in paths}
    step = max(1, rounds // 10)
    for k in range(rounds):
        for j in range(len(paths)):
            name, f = paths[(k + j) % len(paths)]
            got[name].append(f())
        if (k + 1) % step == 0:
            print(f"  {k + 1}/{rounds} rounds", file=sys.stderr, flush=True)

    heads = ("round trip", "in reefd", "outside", "scheduled")
    print(f"{'path':<38}" + "".join(f"{h:>18}" for h in heads))
    print(f"{'(us, p50 / p99)':<38}" + "".join(f"{'p50 /     p99':>18}" for _ in heads))
    rows = {}
    for name, _ in paths:
        rtt = [g[0] / 1e3 for g in got[name]]
        inside = [g[1] / 1e3 for g in got[name]]
        outside = [(g[0] - g[1]) / 1e3 for g in got[name]]
        sched = [g[2] for g in got[name]]
        row = [(pct(v, 0.5), pct(v, 0.99)) for v in (rtt, inside, outside, sched)]
        rows[name] = row
        print(f"{name:<38}" + "".join(f"{a:>9.1f} /{b:>7.1f}" for a, b in row))
    base = rows[paths[0][0]]
    for name, _ in paths[1:]:
        r = rows[name]
        print(f"  {name} over native: round trip {r[0][0] - base[0][0]:+.1f} / "
              f"{r[0][1] - base[0][1]:+.1f} us (p50 / p99), in reefd "
              f"{r[1][0] - base[1][0]:+.1f} / {r[1][1] - base[1][1]:+.1f}, outside "
              f"{r[2][0] - base[2][0]:+.1f} / {r[2][1] - base[2][1]:+.1f}; scheduled "
              f"{r[3][0] / base[3][0]:.3f} / {r[3][1] / base[3][1]:.3f} of native")
    print("percentiles are of each column on its own: p99s do not add up")
    print("in reefd, step medians (us):")
    for name, _ in paths:
        names = NATIVE_STEPS if name == paths[0][0] else FRONT_STEPS
        cols = list(zip(*[g[3] for g in got[name]]))
        print(f"  {name}: " + "; ".join(
            f"{n} {pct(c, 0.5) / 1e3:.1f}" for n, c in zip(names, cols)))


if __name__ == "__main__":
    main()
