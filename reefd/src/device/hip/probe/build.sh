#!/bin/sh
# Rebuilds the probe code objects from probe.ll (see there). Usage:
#   reefd/src/device/hip/probe/build.sh [OUTDIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for arch in gfx906 gfx90a; do
    llc-19 -mtriple=amdgcn-amd-amdhsa -mcpu=$arch -filetype=obj "$here/probe.ll" -o "$tmp/$arch.o"
    ld.lld-19 -shared "$tmp/$arch.o" -o "$out/probe.$arch.hsaco"
done
