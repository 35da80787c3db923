#!/usr/bin/env bash
# Applies rocm-patch/ (REEF's KFD ioctls, REEF §4.5) to Debian's Linux 6.12
# source, checks its style with the tree's checkpatch.pl and compiles the
# amdkfd objects it touches with the tree's own Kbuild. Exits 0 when the
# patch applies without fuzz, checkpatch finds nothing and every object
# compiles (the configuration has CONFIG_WERROR=y, so a warning fails too);
# prints the compiler's errors and the time each step took.
#
# The source is Debian's linux-source-6.12 from bookworm-backports, the same
# version as the UAPI headers scripts/setup.d/20-kernel-headers.sh takes. It
# is fetched as that script fetches its headers: a private apt configuration
# (own source list, lists and cache under the work directory), `apt-get
# download` and `dpkg-deb -x`; nothing is installed from it and the system's
# apt sources are never changed. The kernel build needs flex, bison and
# libelf-dev (Kconfig's parser, objtool); they are installed with apt-get
# when missing, as setup installs gcc.
#
# Configuration: x86_64 `make defconfig`, then amdgpu as a module with HSA
# (KFD), SVM and debugfs enabled, so every amdkfd object is built;
# `make olddefconfig` and `make modules_prepare` run once per tree. The
# patched tree is kept: a later run reverses the last patch it applied, then
# applies the current one, and Kbuild rebuilds only what changed.
#
# Environment:
#   REEF_ROCM_DIR      work directory (default .tools/linux-6.12)
#   REEF_ROCM_OBJECTS  "amdkfd" (default: every amdkfd object, since the
#                      patch changes kfd_priv.h, which they all include) or
#                      "touched" (only the .c files the patch changes)
#   REEF_ROCM_JOBS     make -j (default: the number of CPUs)
#
# Usage: scripts/check-rocm-patch.sh [patch...]
#   (default: every rocm-patch/*.patch, applied in name order)
set -euo pipefail
REEF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${REEF_ROCM_DIR:-$REEF_ROOT/.tools/linux-6.12}"
objects="${REEF_ROCM_OBJECTS:-amdkfd}"
jobs="${REEF_ROCM_JOBS:-$(nproc)}"
if [ "$#" -gt 0 ]; then
    patches=("$@")
else
    patches=("$REEF_ROOT"/rocm-patch/*.patch)
fi
for p in "${patches[@]}"; do
    [ -f "$p" ] || { echo "check-rocm-patch: no patch $p" >&2; exit 2; }
done

start=$(date +%s)
step_start=$start
step() {
    local now
    now=$(date +%s)
    echo "    ($((now - step_start)) s)"
    step_start=$now
    echo "==> $*"
}

echo "==> build tools"
missing=()
command -v flex >/dev/null 2>&1 || missing+=(flex)
command -v bison >/dev/null 2>&1 || missing+=(bison)
[ -f /usr/include/libelf.h ] || [ -f /usr/include/elfutils/libelf.h ] || missing+=(libelf-dev)
command -v bc >/dev/null 2>&1 || missing+=(bc)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v make >/dev/null 2>&1 || missing+=(make)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "    installing: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
fi

step "fetch linux-source-6.12 (bookworm-backports, private apt configuration)"
apt_dir="$work/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$work/deb"
mirror="$(sed -n 's/^URIs:[[:space:]]*\(.*debian\)[[:space:]]*$/\1/p' \
    /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
mirror="${mirror:-http://deb.debian.org/debian}"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-backports main" \
    >"$apt_dir/sources.list"
apt_opts=(
    -o "Dir::Etc::sourcelist=$apt_dir/sources.list"
    -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "APT::Get::List-Cleanup=0"
    -o "APT::Sandbox::User=root"
)
apt-get "${apt_opts[@]}" update -qq
version="$(apt-cache "${apt_opts[@]}" policy linux-source-6.12 | sed -n 's/^ *Candidate: *//p')"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    echo "check-rocm-patch: bookworm-backports offers no linux-source-6.12" >&2
    exit 1
fi
echo "    linux-source-6.12 $version"
deb="$(find "$work/deb" -maxdepth 1 -name "linux-source-6.12_${version//[:]/%3a}_all.deb" | head -n1)"
if [ -z "$deb" ]; then
    rm -f "$work"/deb/linux-source-6.12_*.deb
    (cd "$work/deb" && apt-get "${apt_opts[@]}" download -qq "linux-source-6.12=$version")
    deb="$(find "$work/deb" -maxdepth 1 -name 'linux-source-6.12_*_all.deb' | head -n1)"
fi

step "unpack the source"
tree="$work/linux-source-6.12"
if [ ! -f "$tree/.reef-version" ] || [ "$(cat "$tree/.reef-version")" != "$version" ]; then
    rm -rf "$tree" "$work/pkg"
    dpkg-deb -x "$deb" "$work/pkg"
    tar -xJf "$work/pkg/usr/src/linux-source-6.12.tar.xz" -C "$work"
    rm -rf "$work/pkg"
    echo "$version" >"$tree/.reef-version"
else
    echo "    kept $tree"
fi

step "apply ${patches[*]##*/}"
# The work directory may sit inside a git work tree (.tools of a checkout);
# git apply there would skip every path as outside the current directory.
GIT_CEILING_DIRECTORIES="$(cd "$work" && pwd -P)"
export GIT_CEILING_DIRECTORIES
applied="$tree/.reef-applied.patch"
if [ -f "$applied" ]; then
    # Back to the pristine source (Kbuild then rebuilds what changes).
    if ! (cd "$tree" && git apply -R "$applied"); then
        echo "check-rocm-patch: cannot reverse the previously applied patch; unpack again:" >&2
        echo "    rm -rf $tree && $0" >&2
        exit 1
    fi
    rm -f "$applied"
fi
# git apply: no fuzz, no offsets beyond context matching, all or nothing.
cat "${patches[@]}" >"$applied.new"
if ! (cd "$tree" && git apply --verbose "$applied.new" 2>&1) | tee "$work/apply.log" \
    || ! grep -q '^Applied patch' "$work/apply.log" \
    || grep -q '^Skipped patch' "$work/apply.log"; then
    rm -f "$applied.new"
    echo "check-rocm-patch: FAILED: the patch does not apply to linux-source-6.12 $version" >&2
    exit 1
fi
mv "$applied.new" "$applied"

step "kernel style (the tree's scripts/checkpatch.pl)"
for p in "${patches[@]}"; do
    # --no-signoff: the patch is not submitted upstream from here.
    if ! out="$(perl "$tree/scripts/checkpatch.pl" --no-tree --no-signoff "$p" 2>&1)"; then
        printf '%s\n' "$out" >&2
        echo "check-rocm-patch: FAILED: checkpatch.pl finds errors or warnings in ${p##*/}" >&2
        exit 1
    fi
    echo "$out" | grep '^total:' | sed "s/^/    ${p##*/}: /"
done

step "configure (defconfig + DRM_AMDGPU=m, HSA_AMD, HSA_AMD_SVM, DEBUG_FS; modules_prepare)"
cd "$tree"
if [ ! -f .reef-configured ] || ! grep -q '^CONFIG_HSA_AMD=y' .config; then
    nice make -s defconfig
    # HSA_AMD_SVM needs DEVICE_PRIVATE, hence ZONE_DEVICE and memory
    # hot(un)plug, as in Debian's own amd64 configuration.
    ./scripts/config --enable DRM --module DRM_AMDGPU --enable HSA_AMD \
        --enable MEMORY_HOTPLUG --enable MEMORY_HOTREMOVE \
        --enable ZONE_DEVICE --enable DEVICE_PRIVATE --enable HSA_AMD_SVM \
        --enable DEBUG_FS
    nice make -s olddefconfig
    for opt in CONFIG_DRM_AMDGPU=m CONFIG_HSA_AMD=y CONFIG_HSA_AMD_SVM=y; do
        grep -q "^$opt\$" .config || { echo "check-rocm-patch: $opt did not stick" >&2; exit 1; }
    done
    nice make -s -j"$jobs" modules_prepare
    touch .reef-configured
else
    echo "    kept .config ($(grep -c '=[ym]$' .config) options set)"
fi

kfd=drivers/gpu/drm/amd/amdkfd
# amdkfd's objects are built by amdgpu's Makefile (AMDKFD_PATH := ../amdkfd),
# so their single-object targets are named through amdgpu's directory.
targets=()
case "$objects" in
    touched)
        while read -r f; do
            case "$f" in
                "$kfd"/*.c) targets+=("drivers/gpu/drm/amd/amdgpu/../amdkfd/$(basename "${f%.c}").o") ;;
            esac
        done < <(git apply --numstat "$applied" | cut -f3)
        ;;
    amdkfd)
        # shellcheck disable=SC2016 # $(AMDKFD_PATH) is make's, matched literally
        while read -r o; do
            targets+=("drivers/gpu/drm/amd/amdgpu/../amdkfd/$o")
        done < <(sed -n 's/.*\$(AMDKFD_PATH)\/\([a-z0-9_]*\.o\).*/\1/p' "$kfd/Makefile")
        ;;
    *)
        echo "check-rocm-patch: REEF_ROCM_OBJECTS must be amdkfd or touched" >&2
        exit 2
        ;;
esac

step "build ${#targets[@]} objects (make -j$jobs, nice)"
log="$work/build.log"
set +e
nice make -j"$jobs" "${targets[@]}" >"$log" 2>&1
rc=$?
set -e
grep -c '^  CC \[M\]' "$log" | sed 's/^/    compiled: /'
if [ "$rc" -ne 0 ]; then
    echo "    compiler errors (full log: $log):"
    grep -E 'error|warning|Error' "$log" | head -n 60 | sed 's/^/    /'
fi
now=$(date +%s)
echo "    ($((now - step_start)) s)"
echo "==> total $((now - start)) s (linux-source-6.12 $version, objects: $objects)"
if [ "$rc" -ne 0 ]; then
    echo "check-rocm-patch: FAILED: make exited $rc"
    exit 1
fi
echo "check-rocm-patch: OK: the patch applies to Debian's 6.12 source and its objects compile"
