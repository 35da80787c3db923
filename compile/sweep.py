"""Compile the onnx package's nine light models for sm_80 and sm_90 and check
each result with the project's tools (issue 14 item 5; docs/models.md
"Compiled models"):

- reef-compile (ptxas assembles every kernel for both architectures inside);
- reef-ptx-inject on each architecture's PTX, then ptxas on its output;
- reef-model loads the directory and reef-check-idem analyses it;
- reef-bench standalone on every device preset (simulated stand-alone
  latency from the compiled-kernel cost model).

    .venv/bin/python compile/sweep.py OUT_DIR [--bin target/release] [--model NAME ...]

Prints a markdown table (the catalogue in docs/models.md) and writes
OUT_DIR/sweep.json. Build the Rust tools first:
`cargo build --release -p reef-bench -p reef-trap -p reef-idem`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import onnx

LIGHT = Path(onnx.__file__).parent / "backend/test/data/light"
MODELS = [
    ("alexnet", "light_bvlc_alexnet.onnx"),
    ("densenet121", "light_densenet121.onnx"),
    ("inception_v1", "light_inception_v1.onnx"),
    ("inception_v2", "light_inception_v2.onnx"),
    ("resnet50", "light_resnet50.onnx"),
    ("shufflenet", "light_shufflenet.onnx"),
    ("squeezenet", "light_squeezenet.onnx"),
    ("vgg19", "light_vgg19.onnx"),
    ("zfnet512", "light_zfnet512.onnx"),
]
ARCHS = ["sm_80", "sm_90"]
PRESETS = ["mi50", "gv100", "h100"]
ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


def last_line(p: subprocess.CompletedProcess) -> str:
    lines = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()]
    return lines[-1] if lines else f"exit {p.returncode}"


def ptxas() -> Path:
    found = sorted((Path(sys.prefix) / "lib").glob("python*/site-packages/nvidia/*/bin/ptxas"))
    return found[-1]


def one(name: str, onnx_file: str, out: Path, bins: Path) -> dict:
    row: dict = {"model": name}
    d = out / name
    t = time.monotonic()
    p = run(
        [str(Path(sys.prefix) / "bin/reef-compile"), str(LIGHT / onnx_file), "-o", str(d)]
        + [x for a in ARCHS for x in ("--arch", a)]
    )
    row["compile_s"] = round(time.monotonic() - t, 1)
    if p.returncode != 0:
        row["error"] = last_line(p)
        return row
    sched = json.loads((d / f"{name}.json").read_text())
    row["kernels"] = len(sched["kernels"])
    row["ptx_entries"] = len({k["name"] for k in sched["kernels"]})
    row["weights_mb"] = round(sched["weights"]["bytes"] / 1e6, 1)
    row["time_split_s"] = sched["compile_time"]
    for arch in ARCHS:
        inj = d / f"injected.{arch}.ptx"
        p = run([str(bins / "reef-ptx-inject"), str(d / f"kernels.{arch}.ptx"), "-o", str(inj)])
        if p.returncode != 0:
            row["error"] = f"reef-ptx-inject {arch}: {last_line(p)}"
            return row
        p = run([str(ptxas()), f"-arch={arch}", str(inj), "-o", str(inj.with_suffix(".cubin"))])
        if p.returncode != 0:
            row["error"] = f"ptxas on injected {arch}: {last_line(p)}"
            return row
        inj.with_suffix(".cubin").unlink()
        inj.unlink()
    row["inject_ok"] = True
    p = run([str(bins / "reef-check-idem"), str(d), "--json"])
    if p.returncode != 0:
        row["error"] = f"reef-check-idem: {last_line(p)}"
        return row
    row["idem"] = json.loads(p.stdout)
    for preset in PRESETS:
        p = run(
            [str(bins / "reef-bench"), "standalone", "--device", preset, "--models-dir", str(out),
             "--model", name, "--json"]
        )
        if p.returncode != 0:
            row["error"] = f"reef-bench standalone --device {preset}: {last_line(p)}"
            return row
        row[f"{preset}_us"] = json.loads(p.stdout.splitlines()[0])["simulated_us"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--bin", type=Path, default=ROOT / "target/release")
    ap.add_argument("--model", action="append")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, f in MODELS:
        if a.model and name not in a.model:
            continue
        r = one(name, f, a.out, a.bin)
        rows.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
    (a.out / "sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    print("| model | kernels (launches / PTX entries) | weights MB | compile s | idempotent alone | mi50 us | gv100 us | h100 us |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | fails: {r['error']} | | {r['compile_s']} | | | | |")
            continue
        idem = r["idem"]
        idem_s = f"{idem.get('idempotent', '?')}/{idem.get('kernels', '?')}"
        print(
            f"| {r['model']} | {r['kernels']} / {r['ptx_entries']} | {r['weights_mb']} | {r['compile_s']} | {idem_s} "
            f"| {r['mi50_us']:.0f} | {r['gv100_us']:.0f} | {r['h100_us']:.0f} |"
        )


if __name__ == "__main__":
    main()
