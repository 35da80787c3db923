#!/usr/bin/env bash
# Installs reefd and reefctl, a default /etc/reef/reefd.toml, the `reef`
# socket group and the systemd unit (docs/daemon.md).
#
#   sudo ./scripts/install.sh [--prefix DIR] [--destdir DIR] [--no-build]
#
# --prefix   installation prefix (default /usr/local): binaries in PREFIX/bin
# --destdir  stage everything under DIR instead of / (packaging, testing);
#            no group is created and systemd is not told
# --no-build install binaries already built in target/release
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

prefix=/usr/local
destdir=
build=1
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
        --destdir) destdir="${2:?--destdir needs a directory}"; shift 2 ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ -z "$destdir" ] && [ "$(id -u)" -ne 0 ]; then
    echo "install.sh: installing into the system needs root: run it with sudo (or use --destdir DIR to stage)" >&2
    exit 1
fi

target="${CARGO_TARGET_DIR:-target}/release"
if [ "$build" = 1 ]; then
    cargo build --release -p reefd
fi
for b in reefd reefctl; do
    if [ ! -x "$target/$b" ]; then
        echo "install.sh: $target/$b is missing; build it with 'cargo build --release -p reefd' or drop --no-build" >&2
        exit 1
    fi
done

bindir="$prefix/bin"
install -d "$destdir$bindir" "$destdir/etc/reef" "$destdir/etc/systemd/system" \
    "$destdir$prefix/share/doc/reef"
install -m 0755 "$target/reefd" "$target/reefctl" "$destdir$bindir/"
install -m 0644 docs/daemon.md docs/protocol.md "$destdir$prefix/share/doc/reef/"

config="$destdir/etc/reef/reefd.toml"
if [ -e "$config" ]; then
    echo "install.sh: keeping the existing $config"
else
    cat > "$config" <<'TOML'
# reefd configuration; every key and its default: docs/daemon.md.
[daemon]
socket = "/run/reef/reefd.sock"
socket_mode = "0660"
# Members of this group may use reefd (add users with: usermod -aG reef USER).
socket_group = "reef"
pid_file = "/run/reef/reefd.pid"
log_level = "info"
shutdown_grace_ms = 5000
# On a machine with cores to spare, give the thread that polls the socket
# and runs the device a core of its own (docs/daemon.md, device_cpus):
# device_cpus = [3]
# device_nice = -20

[device]
# auto: a real GPU if this build can drive it, else the simulated MI50.
device = "auto"
# Where `reefctl models load NAME` finds models (a copy of shared/models/mi50).
# Empty: $REEF_SHARED/models/mi50, else <source checkout>/../shared/models/mi50.
models_dir = ""

[scheduler]
# reef: preemption and dynamic kernel padding; reef-nodkp: preemption only
policy = "reef"

[metrics]
enabled = true
listen = "127.0.0.1:9464"
TOML
    chmod 0644 "$config"
fi

sed "s|@BINDIR@|$bindir|g; s|/usr/local/share/doc/reef|$prefix/share/doc/reef|g" \
    scripts/reefd.service > "$destdir/etc/systemd/system/reefd.service"
chmod 0644 "$destdir/etc/systemd/system/reefd.service"

if [ -z "$destdir" ]; then
    if ! getent group reef > /dev/null; then
        groupadd --system reef
        echo "install.sh: created group reef (socket access)"
    fi
    if [ -d /run/systemd/system ] && command -v systemctl > /dev/null; then
        systemctl daemon-reload
        echo "install.sh: installed; start it with: systemctl enable --now reefd"
    else
        echo "install.sh: installed; systemd is not running here, start it with: $bindir/reefd start"
    fi
else
    echo "install.sh: staged under $destdir"
fi
