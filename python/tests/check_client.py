"""Exercises reef_client against a running reefd serving the two-kernel
model (x: float32 [2048] -> y: float32 [2048]); run by reefd's
tests/tensors.rs as `python check_client.py SOCKET MODEL`. Prints one JSON
line: the output of each path, and the error of a bad input."""

import json
import sys

import numpy as np

from reef_client import Client, ReefError, ShmRegion

sock, model = sys.argv[1], sys.argv[2]
c = Client(sock)
c.models()
stream = c.register("rt", "python")
x = (np.arange(2048, dtype=np.float32) % 13) / 7.0 - 0.5
r1, inline = c.infer(stream, model, {"x": x})
region = ShmRegion(1 << 16)
r2, shm = c.infer(stream, model, {"x": x}, shm=region)
try:
    c.infer(stream, model, {"x": x.astype(np.float64)})
    bad = None
except ReefError as e:
    bad = [e.code, e.message]
print(json.dumps({
    "inline": inline["y"].tobytes().hex() if "y" in inline else None,
    "shm": shm["y"].tobytes().hex() if "y" in shm else None,
    "missing": r1.get("outputs_missing"),
    "bad": bad,
    "x": x.tobytes().hex(),
}))
