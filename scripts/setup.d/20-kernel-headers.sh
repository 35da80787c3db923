# Kernel UAPI headers for reef-ioctl's header-comparison tests, and the apt
# packages its FUSE fake devices need.
#
# The KFD debug-trap ioctls (AMDKFD_IOC_RUNTIME_ENABLE, AMDKFD_IOC_DBG_TRAP)
# appeared in Linux 6.4; bookworm's own linux-libc-dev is 6.1 and lacks them.
# The 6.x package is fetched from bookworm-backports with a private apt
# configuration (its own source list, lists directory and cache under
# $REEF_ROOT/.tools/apt), downloaded with `apt-get download` and unpacked with
# `dpkg-deb -x` into $REEF_ROOT/.tools/linux-libc-dev. Nothing is installed
# into the system and the system's apt sources are never changed.
#
# Sourced by scripts/setup.sh with REEF_ROOT set; idempotent.
reef_hdr_dir="$REEF_ROOT/.tools/linux-libc-dev"
if [ ! -f "$reef_hdr_dir/usr/include/linux/kfd_ioctl.h" ] \
    || ! grep -q AMDKFD_IOC_DBG_TRAP "$reef_hdr_dir/usr/include/linux/kfd_ioctl.h"; then
    reef_apt="$REEF_ROOT/.tools/apt"
    mkdir -p "$reef_apt/lists/partial" "$reef_apt/cache/archives/partial" "$reef_apt/deb"
    # The mirror is the one the system already uses for bookworm.
    reef_mirror="$(sed -n 's/^URIs:[[:space:]]*\(.*debian\)[[:space:]]*$/\1/p' \
        /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
    reef_mirror="${reef_mirror:-http://deb.debian.org/debian}"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $reef_mirror bookworm-backports main" \
        >"$reef_apt/sources.list"
    reef_apt_opts=(
        -o "Dir::Etc::sourcelist=$reef_apt/sources.list"
        -o "Dir::Etc::sourceparts=-"
        -o "Dir::State::Lists=$reef_apt/lists"
        -o "Dir::Cache=$reef_apt/cache"
        -o "APT::Get::List-Cleanup=0"
        -o "APT::Sandbox::User=root"
    )
    apt-get "${reef_apt_opts[@]}" update -qq
    rm -f "$reef_apt"/deb/linux-libc-dev_*.deb
    (cd "$reef_apt/deb" && apt-get "${reef_apt_opts[@]}" download -qq linux-libc-dev/bookworm-backports)
    rm -rf "$reef_hdr_dir"
    mkdir -p "$reef_hdr_dir"
    dpkg-deb -x "$reef_apt"/deb/linux-libc-dev_*.deb "$reef_hdr_dir"
    dpkg-deb -f "$reef_apt"/deb/linux-libc-dev_*.deb Version >"$reef_hdr_dir/VERSION"
    if ! grep -q AMDKFD_IOC_DBG_TRAP "$reef_hdr_dir/usr/include/linux/kfd_ioctl.h"; then
        echo "setup: the linux-libc-dev from bookworm-backports has no AMDKFD_IOC_DBG_TRAP" >&2
        return 1 2>/dev/null || exit 1
    fi
    unset reef_apt reef_mirror reef_apt_opts
fi
echo "    kernel headers: linux-libc-dev $(cat "$reef_hdr_dir/VERSION" 2>/dev/null) in $reef_hdr_dir"
unset reef_hdr_dir

# A C compiler for the header comparisons, and FUSE userspace (fusermount3,
# used by the fuser crate when the mount(2) call itself is not permitted).
reef_missing=()
command -v cc >/dev/null 2>&1 || reef_missing+=(gcc libc6-dev)
command -v fusermount3 >/dev/null 2>&1 || reef_missing+=(fuse3)
if [ "${#reef_missing[@]}" -gt 0 ]; then
    echo "    installing: ${reef_missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${reef_missing[@]}" >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${reef_missing[@]}" >/dev/null; }
fi
unset reef_missing
