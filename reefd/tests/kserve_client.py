"""Triton's own client (tritonclient, PyPI) against reefd's Open Inference
Protocol fronts: run by reefd/tests/kserve.rs with the repository's .venv.

Usage: kserve_client.py HTTP_ADDR GRPC_ADDR TOKEN MODEL

Every check asserts what the protocol says the answer is; the first that
fails raises, and the script exits non-zero with its traceback. It prints
one line per check so the Rust test can show where it stopped.
"""

import asyncio
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

HTTP, GRPC, TOKEN, MODEL = sys.argv[1:5]
ADMIN_HTTP = {"Authorization": f"Bearer {TOKEN}"}
# gRPC metadata keys are lower case.
ADMIN_GRPC = {"authorization": f"Bearer {TOKEN}"}


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

    ins, _ = inputs_for(meta, mod)
    for prio in (1, 0, 10):
        r = client.infer(MODEL, ins, priority=prio)
        check(f"{kind}: infer priority={prio} answered", r.get_response() is not None)
    refused(f"{kind}: priority 11", lambda: client.infer(MODEL, ins, priority=11), "priority")

    st = client.get_inference_statistics(MODEL)
    stats = st["model_stats"] if isinstance(st, dict) else st.model_stats
    n = stats[0]["inference_stats"]["success"]["count"] if isinstance(st, dict) else stats[0].inference_stats.success.count
    check(f"{kind}: statistics count successes ({n})", int(n) >= 3)

    # System shared memory: registered, listed, unregistered.
    key = f"/reef_kserve_{kind}"
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
    h = httpaio.InferenceServerClient(HTTP)
    g = grpcaio.InferenceServerClient(GRPC)
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
    h = httpclient.InferenceServerClient(HTTP)
    common(h, httpclient, ADMIN_HTTP, "http")
    g = grpcclient.InferenceServerClient(GRPC)
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
