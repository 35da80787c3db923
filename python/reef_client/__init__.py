"""Python client of reefd (docs/protocol.md): numpy tensors in and out,
inline in the request's frame or through a shared-memory region.

Frames: a 4-byte big-endian length, then either a JSON object, or a
*tensor frame*: the byte 0x00, a 4-byte big-endian JSON length, the JSON,
then the data section holding the inline tensors' bytes.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import socket
import struct

import numpy as np

__all__ = ["Client", "ShmRegion", "ReefError"]

TENSOR_FRAME = 0


class ReefError(Exception):
    """reefd refused a request: `code` (e.g. "bad_request") and its message."""

    def __init__(self, code: str, message: str):
        super().__init__(f"reefd answered {code}: {message}")
        self.code = code
        self.message = message


class ShmRegion:
    """A shared-memory region: a memfd sealed against shrinking and growing
    (what reefd requires, so it never reads past the file's end), mapped
    here read-write. Register it with Client.register_region, or pass it to
    Client.infer(shm=...)."""

    def __init__(self, size: int):
        if size <= 0:
            raise ValueError("a region has at least one byte")
        self.fd = os.memfd_create("reef-tensors", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, size)
        fcntl.fcntl(
            self.fd,
            fcntl.F_ADD_SEALS,
            fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL,
        )
        self.size = size
        self.map = mmap.mmap(self.fd, size)
        # The daemon's id of it, per client connection.
        self.ids: dict[int, int] = {}

    def view(self, offset: int, dtype, shape) -> np.ndarray:
        """An array over the region's bytes at `offset` (no copy)."""
        dt = np.dtype(dtype).newbyteorder("<")
        n = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(self.map, dtype=dt, count=n, offset=offset).reshape(shape)

    def close(self):
        self.map.close()
        os.close(self.fd)


def _dtype_name(a: np.ndarray) -> str:
    return "bool" if a.dtype == np.bool_ else a.dtype.name


class Client:
    """A connection to reefd."""

    def __init__(self, path: str = "/run/reef/reefd.sock"):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.next_id = 1
        self.events: list = []
        self._models: dict[str, dict] = {}

    def close(self):
        self.sock.close()

    # -- framing ---------------------------------------------------------

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError("reefd closed the connection")
            got += k
        return buf

    def _read_message(self):
        (n,) = struct.unpack(">I", self._recv_exact(4))
        payload = self._recv_exact(n)
        if n and payload[0] == TENSOR_FRAME:
            (h,) = struct.unpack(">I", payload[1:5])
            msg = json.loads(bytes(payload[5 : 5 + h]))
            return msg, memoryview(payload)[5 + h :]
        return json.loads(bytes(payload)), None

    def _send(self, body: dict, data=(), fds=()) -> int:
        rid = self.next_id
        self.next_id += 1
        req = json.dumps({"id": rid, **body}).encode()
        if data:
            total = 5 + len(req) + sum(len(d) for d in data)
            head = struct.pack(">IBI", total, TENSOR_FRAME, len(req)) + req
        else:
            head = struct.pack(">I", len(req)) + req
        if fds:
            socket.send_fds(self.sock, [head], list(fds))
        else:
            self.sock.sendall(head)
        for d in data:
            self.sock.sendall(d)
        return rid

    def _wait(self, rid: int):
        while True:
            msg, data = self._read_message()
            t = msg.get("type")
            if t == "event":
                self.events.append(msg["event"])
                continue
            if msg.get("id") not in (rid, None):
                raise RuntimeError(f"unexpected answer {msg}")
            if t == "error":
                raise ReefError(msg["code"], msg["message"])
            return msg["result"], data

    def call(self, body: dict) -> dict:
        return self._wait(self._send(body))[0]

    # -- requests --------------------------------------------------------

    def hello(self) -> dict:
        return self.call({"op": "hello"})

    def load_model(self, name: str, path: str | None = None) -> dict:
        body = {"op": "load_model", "name": name}
        if path is not None:
            body["path"] = str(path)
        m = self.call(body)
        self._models[m["name"]] = m
        return m

    def models(self) -> list:
        ms = self.call({"op": "list_models"})["models"]
        for m in ms:
            self._models[m["name"]] = m
        return ms

    def model(self, name: str) -> dict:
        if name not in self._models:
            self.models()
        return self._models[name]

    def register(self, priority="rt", label: str | None = None) -> int:
        body = {"op": "register", "priority": priority}
        if label:
            body["label"] = label
        return self.call(body)["stream"]

    def register_region(self, region: ShmRegion) -> int:
        """Registers `region` (its memfd travels with the request,
        SCM_RIGHTS); returns the daemon's id of it."""
        rid = self._send({"op": "register_region"}, fds=[region.fd])
        r, _ = self._wait(rid)
        region.ids[id(self)] = r["region"]
        return r["region"]

    def unregister_region(self, region: int):
        self.call({"op": "unregister_region", "region": region})

    def infer(self, stream: int, model: str, inputs: dict | None = None, shm: ShmRegion | None = None,
              copy_outputs: bool = True):
        """Runs one inference. `inputs` maps the model's ONNX input names
        to arrays (None: no tensors, as before). Inline unless `shm` is a
        region: then inputs are copied into it (one copy) and outputs are
        written there by the daemon. Returns (result, outputs), outputs
        mapping ONNX output names to arrays (views into the region when
        copy_outputs is False)."""
        body = {"op": "infer", "stream": stream, "model": model}
        if inputs is None:
            return self.call(body), {}
        refs, data = [], []
        if shm is None:
            off = 0
            for name, a in inputs.items():
                a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
                b = memoryview(a).cast("B")
                refs.append({"name": name, "dtype": _dtype_name(a), "shape": list(a.shape),
                             "offset": off, "bytes": len(b)})
                data.append(b)
                off += len(b)
        else:
            region = shm.ids.get(id(self))
            if region is None:
                region = self.register_region(shm)
            off = 0
            for name, a in inputs.items():
                a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
                n = a.nbytes
                if off + n > shm.size:
                    raise ValueError(f"the region of {shm.size} bytes cannot hold the inputs")
                shm.map[off : off + n] = memoryview(a).cast("B")
                refs.append({"name": name, "dtype": _dtype_name(a), "shape": list(a.shape),
                             "region": region, "offset": off, "bytes": n})
                off += n
            outs = []
            for o in self.model(model)["outputs"]:
                n = int(np.prod(o["shape"], dtype=np.int64)) * np.dtype(o["dtype"]).itemsize
                if off + n > shm.size:
                    raise ValueError(f"the region of {shm.size} bytes cannot hold the outputs")
                outs.append({"name": o["name"], "region": region, "offset": off, "bytes": n})
                off += n
            body["outputs"] = outs
        body["inputs"] = refs
        rid = self._send(body, data=data)
        result, section = self._wait(rid)
        outputs = {}
        for o in result.get("outputs", []):
            dt = np.dtype(o["dtype"]).newbyteorder("<")
            n = int(np.prod(o["shape"], dtype=np.int64))
            if o.get("region") is None:
                a = np.frombuffer(section, dtype=dt, count=n, offset=o["offset"]).reshape(o["shape"])
            else:
                a = shm.view(o["offset"], dt, o["shape"])
                if copy_outputs:
                    a = a.copy()
            outputs[o["name"]] = a
        return result, outputs
