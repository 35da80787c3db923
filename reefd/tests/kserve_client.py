"""Triton's own client (tritonclient, PyPI) against reefd's Open Inference
Protocol fronts: run by reefd/tests/kserve.rs with the repository's .venv.

Usage: kserve_client.py HTTP_ADDR GRPC_ADDR TOKEN MODEL [REFERENCE.onnx]

Over TLS (reefd/tests/kserve_tls.rs), REEF_TLS_CA names the CA that
issued the server's certificate and REEF_TLS_CERT / REEF_TLS_KEY the
client's certificate and key (mutual TLS); every client then connects with
tritonclient's own TLS options. REEF_TLS_STRANGER_CERT / _KEY, a client
certificate from another CA, adds the refusals: no client certificate, or
that one, fails the handshake over both fronts.

Every check asserts what the protocol says the answer is; the first that
fails raises, and the script exits non-zero with its traceback. It prints
one line per check so the Rust test can show where it stopped.
"""

import asyncio
import os
import ssl
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

HTTP, GRPC, TOKEN, MODEL = sys.argv[1:5]
# An ONNX file whose outputs the answers must equal (ONNX Runtime's).
REFERENCE = sys.argv[5] if len(sys.argv) > 5 else None
# Shared memory keys and region names of this run only (tests run at once).
TAG = f"{os.getpid()}"
ADMIN_HTTP = {"Authorization": f"Bearer {TOKEN}"}
# gRPC metadata keys are lower case.
ADMIN_GRPC = {"authorization": f"Bearer {TOKEN}"}


CA, CERT, KEY = (os.environ.get(k) for k in ("REEF_TLS_CA", "REEF_TLS_CERT", "REEF_TLS_KEY"))
STRANGER = (os.environ.get("REEF_TLS_STRANGER_CERT"), os.environ.get("REEF_TLS_STRANGER_KEY"))


def http_sync(cert=CERT, key=KEY):
    """tritonclient.http, over TLS when REEF_TLS_CA is set (ssl_options as
    geventhttpclient reads them: ca_certs, certfile, keyfile)."""
    if not CA:
        return httpclient.InferenceServerClient(HTTP)
    opts = {"ca_certs": CA}
    if cert:
        opts.update(certfile=cert, keyfile=key)
    return httpclient.InferenceServerClient(HTTP, ssl=True, ssl_options=opts)


def grpc_sync(cert=CERT, key=KEY):
    if not CA:
        return grpcclient.InferenceServerClient(GRPC)
    return grpcclient.InferenceServerClient(
        GRPC, ssl=True, root_certificates=CA, private_key=key, certificate_chain=cert)


def http_async():
    if not CA:
        return httpaio.InferenceServerClient(HTTP)
    ctx = ssl.create_default_context(cafile=CA)
    ctx.load_cert_chain(CERT, KEY)
    return httpaio.InferenceServerClient(HTTP, ssl=True, ssl_context=ctx)


def grpc_async():
    if not CA:
        return grpcaio.InferenceServerClient(GRPC)
    return grpcaio.InferenceServerClient(
        GRPC, ssl=True, root_certificates=CA, private_key=KEY, certificate_chain=CERT)


def handshake_refused(what, f):
    """The server refuses the client in the TLS handshake: the call fails
    with the library's connection error and never gets an answer."""
    try:
        r = f()
    except Exception as e:  # ssl.SSLError, a reset, or gRPC's UNAVAILABLE
        print(f"ok: {what} refused: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return
    raise AssertionError(f"{what}: answered {r!r}, should have failed the handshake")


def check(what, cond):
    if not cond:
        raise AssertionError(what)
    print(f"ok: {what}", flush=True)


def refused(what, f, *words):
    try:
        f()
    except InferenceServerException as e:
        msg = str(e)
        for w in words:
            if w.lower() not in msg.lower():
                raise AssertionError(f"{what}: error {msg!r} lacks {w!r}")
        print(f"ok: {what} refused: {msg}", flush=True)
        return
    raise AssertionError(f"{what}: accepted, should have been refused")


def inputs_for(meta, mod):
    """Inputs of the model's declared shape and type, and their arrays."""
    ins, arrays = [], []
    rng = np.random.default_rng(7)
    for t in meta_inputs(meta):
        shape = [int(d) for d in t["shape"]]
        dt = t["datatype"]
        if dt == "FP32":
            a = rng.standard_normal(shape).astype(np.float32)
        elif dt == "INT64":
            a = rng.integers(0, 4, size=shape, dtype=np.int64)
        else:
            raise AssertionError(f"test has no data for {dt}")
        i = mod.InferInput(t["name"], shape, dt)
        i.set_data_from_numpy(a)
        ins.append(i)
        arrays.append(a)
    return ins, arrays


def meta_outputs(meta):
    if isinstance(meta, dict):
        return meta.get("outputs", [])
    return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.outputs]


def same(a, b):
    """Bit-equal (the simulated libcuda's outputs are hash bytes, NaNs
    included, so == on floats would not do)."""
    return a.shape == b.shape and a.tobytes() == b.tobytes()


NP = {"FP32": np.float32, "INT64": np.int64, "FP64": np.float64, "INT32": np.int32}


def data_checks(client, mod, kind, meta, ins, arrays, outs):
    """Outputs: declared shapes, the same on every path (JSON, binary,
    shared memory) and for the same input; the reference's when given."""
    first = client.infer(MODEL, ins)
    got = {}
    for o in outs:
        a = first.as_numpy(o["name"])
        check(f"{kind}: output {o['name']} has its declared shape", list(a.shape) == [int(d) for d in o["shape"]])
        got[o["name"]] = a
    again = client.infer(MODEL, ins, priority=1)
    for o in outs:
        check(f"{kind}: same input, same {o['name']}", same(again.as_numpy(o["name"]), got[o["name"]]))
    if mod is httpclient:
        for binary in (False, True):
            req = [mod.InferRequestedOutput(o["name"], binary_data=binary) for o in outs]
            r = client.infer(MODEL, ins, outputs=req)
            for o in outs:
                a = r.as_numpy(o["name"])
                # JSON has no NaN (it is sent as null and read back as NaN).
                ok = same(a, got[o["name"]]) if binary else np.array_equal(a, got[o["name"]], equal_nan=True)
                check(f"{kind}: {o['name']} as {'binary' if binary else 'JSON'} equals", ok)
    # Inputs and outputs through system shared memory.
    handles = []
    try:
        shm_ins = []
        for t, a in zip(meta_inputs(meta), arrays):
            key = f"/reef_kin_{kind}_{TAG}_{len(handles)}"
            h = shm.create_shared_memory_region(f"in{len(handles)}_{kind}", key, a.nbytes)
            handles.append((h, f"in{len(handles)}_{kind}"))
            shm.set_shared_memory_region(h, [a])
            client.register_system_shared_memory(handles[-1][1], key, a.nbytes)
            i = mod.InferInput(t["name"], list(a.shape), t["datatype"])
            i.set_shared_memory(handles[-1][1], a.nbytes)
            shm_ins.append(i)
        shm_outs = []
        for o in outs:
            n = got[o["name"]].nbytes
            key = f"/reef_kout_{kind}_{TAG}_{len(handles)}"
            h = shm.create_shared_memory_region(f"out{len(handles)}_{kind}", key, n)
            handles.append((h, f"out{len(handles)}_{kind}"))
            client.register_system_shared_memory(handles[-1][1], key, n)
            r = mod.InferRequestedOutput(o["name"])
            r.set_shared_memory(handles[-1][1], n)
            shm_outs.append((o, h, r))
        client.infer(MODEL, shm_ins, outputs=[r for _, _, r in shm_outs])
        for o, h, _ in shm_outs:
            a = shm.get_contents_as_numpy(h, NP[o["datatype"]], [int(d) for d in o["shape"]])
            check(f"{kind}: {o['name']} through shared memory equals", same(a, got[o["name"]]))
    finally:
        for h, name in handles:
            try:
                client.unregister_system_shared_memory(name)
            except InferenceServerException:
                pass
            shm.destroy_shared_memory_region(h)
    if REFERENCE:
        import onnxruntime as ort
        sess = ort.InferenceSession(REFERENCE, providers=["CPUExecutionProvider"])
        # The daemon may declare a flat shape (a model compiled without its
        # reference shapes); ONNX Runtime takes the graph's own.
        shapes = {i.name: i.shape for i in sess.get_inputs()}
        feeds = {t["name"]: a.reshape(shapes[t["name"]]) for t, a in zip(meta_inputs(meta), arrays)}
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        for o in outs:
            w = want[o["name"]].reshape(got[o["name"]].shape)
            ok = np.allclose(got[o["name"]], w, rtol=1e-4, atol=1e-5)
            check(f"{kind}: {o['name']} equals ONNX Runtime's (max |diff| {np.max(np.abs(got[o['name']] - w)):.2e})", ok)


def meta_inputs(meta):
    if isinstance(meta, dict):
        return meta.get("inputs", [])
    return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.inputs]


def common(client, mod, admin, kind):
    check(f"{kind}: server live", client.is_server_live())
    check(f"{kind}: server ready", client.is_server_ready())
    md = client.get_server_metadata()
    ext = md["extensions"] if isinstance(md, dict) else list(md.extensions)
    name = md["name"] if isinstance(md, dict) else md.name
    check(f"{kind}: server metadata names reefd", name == "reefd")
    for e in ["model_repository", "schedule_policy", "system_shared_memory", "statistics"]:
        check(f"{kind}: extension {e} listed", e in ext)

    refused(f"{kind}: load without the token", lambda: client.load_model(MODEL), "token")
    client.load_model(MODEL, headers=admin)
    check(f"{kind}: model ready after load", client.is_model_ready(MODEL))
    idx = client.get_model_repository_index()
    names = [m["name"] for m in idx] if isinstance(idx, list) else [m.name for m in idx.models]
    check(f"{kind}: repository index lists {MODEL}", MODEL in names)
    meta = client.get_model_metadata(MODEL)
    mname = meta["name"] if isinstance(meta, dict) else meta.name
    check(f"{kind}: model metadata", mname == MODEL)
    refused(f"{kind}: unknown model", lambda: client.get_model_metadata("no_such_model"), "not loaded")
    check(f"{kind}: unknown model not ready", not client.is_model_ready("no_such_model"))

    ins, arrays = inputs_for(meta, mod)
    for prio in (1, 0, 10):
        r = client.infer(MODEL, ins, priority=prio)
        check(f"{kind}: infer priority={prio} answered", r.get_response() is not None)
    refused(f"{kind}: priority 11", lambda: client.infer(MODEL, ins, priority=11), "priority")
    # The front's steps (docs/kserve.md, "Where the round trip goes"):
    # CLOCK_MONOTONIC, in the order the request passed them, on this
    # process's clock (time.monotonic_ns) between its call and its return.
    keys = ["reef_read_ns", "reef_entered_ns", "reef_called_ns", "reef_done_ns",
            "reef_seen_ns", "reef_answered_ns", "reef_built_ns"]
    t0 = time.monotonic_ns()
    r = client.infer(MODEL, ins, priority=1, parameters={"reef_timeline": True})
    t1 = time.monotonic_ns()
    p = r.get_response()["parameters"] if kind == "http" else r.get_response().parameters
    if kind == "http":
        t = [int(p.get(k, 0)) for k in keys]
    else:
        t = [p[k].uint64_param if k in p else 0 for k in keys]
    check(f"{kind}: reef_timeline stamps in order within the call {t0} {t} {t1}",
          all(a <= b for a, b in zip([t0] + t, t + [t1])))
    plain = client.infer(MODEL, ins, priority=1).get_response()
    plain = plain["parameters"] if kind == "http" else plain.parameters
    check(f"{kind}: no reef_timeline unless asked", "reef_read_ns" not in plain)
    outs = meta_outputs(meta)
    if outs:
        data_checks(client, mod, kind, meta, ins, arrays, outs)

    st = client.get_inference_statistics(MODEL)
    stats = st["model_stats"] if isinstance(st, dict) else st.model_stats
    n = stats[0]["inference_stats"]["success"]["count"] if isinstance(st, dict) else stats[0].inference_stats.success.count
    check(f"{kind}: statistics count successes ({n})", int(n) >= 3)

    # System shared memory: registered, listed, unregistered.
    key = f"/reef_kserve_{kind}_{TAG}"
    h = shm.create_shared_memory_region(f"r_{kind}", key, 4096)
    try:
        refused(f"{kind}: region past its object",
                lambda: client.register_system_shared_memory(f"r_{kind}", key, 8192), "does not fit")
        client.register_system_shared_memory(f"r_{kind}", key, 4096)
        s = client.get_system_shared_memory_status()
        listed = [r["name"] for r in s] if isinstance(s, list) else list(s.regions.keys())
        check(f"{kind}: region registered", f"r_{kind}" in listed)
        client.unregister_system_shared_memory(f"r_{kind}")
        s = client.get_system_shared_memory_status()
        listed = [r["name"] for r in s] if isinstance(s, list) else list(s.regions.keys())
        check(f"{kind}: region unregistered", f"r_{kind}" not in listed)
    finally:
        shm.destroy_shared_memory_region(h)

    refused(f"{kind}: unload without the token", lambda: client.unload_model(MODEL), "token")
    client.unload_model(MODEL, headers=admin)
    check(f"{kind}: model not ready after unload", not client.is_model_ready(MODEL))
    client.load_model(MODEL, headers=admin)


async def asynchronous():
    h = http_async()
    g = grpc_async()
    try:
        check("http aio: live", await h.is_server_live())
        check("grpc aio: live", await g.is_server_live())
        hm = await h.get_model_metadata(MODEL)
        gm = await g.get_model_metadata(MODEL)
        hi, _ = inputs_for(hm, httpclient)
        gi, _ = inputs_for(gm, grpcclient)
        rs = await asyncio.gather(*[h.infer(MODEL, hi, priority=2) for _ in range(4)],
                                  *[g.infer(MODEL, gi, priority=2) for _ in range(4)])
        check("aio: 8 concurrent infers answered", all(r.get_response() is not None for r in rs))
    finally:
        await h.close()
        await g.close()


def main():
    if STRANGER[0]:
        for name, (cert, key) in [("no client certificate", (None, None)),
                                  ("another CA's client certificate", STRANGER)]:
            handshake_refused(f"https, {name}", lambda: http_sync(cert, key).is_server_live())
            handshake_refused(f"grpc tls, {name}", lambda: grpc_sync(cert, key).is_server_live())
    h = http_sync()
    common(h, httpclient, ADMIN_HTTP, "http")
    g = grpc_sync()
    common(g, grpcclient, ADMIN_GRPC, "grpc")
    # The sync clients' async calls.
    meta = h.get_model_metadata(MODEL)
    ins, _ = inputs_for(meta, httpclient)
    reqs = [h.async_infer(MODEL, ins, priority=1) for _ in range(3)]
    check("http async_infer answered", all(r.get_result().get_response() is not None for r in reqs))
    asyncio.run(asynchronous())
    print("all checks passed", flush=True)


if __name__ == "__main__":
    main()
