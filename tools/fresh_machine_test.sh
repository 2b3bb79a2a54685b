#!/usr/bin/env bash
# The README's two commands on a fresh, minimal Debian 12, as a new user would meet them:
#
#   sudo tools/fresh_machine_test.sh [--keep] [--mirror URL]      (needs root: debootstrap, chroot, mount)
#
#  1. debootstrap a minimal Debian 12 (bookworm, variant minbase) plus only git, make and ca-certificates into a
#     temporary folder; /proc and /dev mounted as on a real machine;
#  2. git clone this repository's HEAD into it (committed work only: the check is of what a clone gets);
#  3. as an ordinary user: `make test` must stop at once with one line naming what is missing and the one
#     complete command (no sudo) that installs it;
#  4. as root: `make test` installs every package itself (the compiler included), builds, runs the suite;
#  5. as root: a short `make run` (the make-run preset cut to a few steps through RUN_ARGS).
#
# Prints PASS/FAIL per step and exits non-zero if any failed. CI runs it (.ci/run) when it is root and
# debootstrap can reach a Debian mirror; about 10 minutes on 2 cores.
set -uo pipefail
keep=0
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
while [ $# -gt 0 ]; do
    case "$1" in
        --keep) keep=1 ;;
        --mirror) mirror=$2; shift ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument '$1' (see --help)"; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "error: needs root (debootstrap, chroot, mount)"; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
command -v debootstrap >/dev/null 2>&1 || {
    echo "installing debootstrap"
    (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null) || { echo "error: cannot install debootstrap"; exit 1; }
}
root=$(mktemp -d /tmp/icl-fresh.XXXXXX)
chmod 755 "$root"  # a root file system: everyone may enter it
mounted=()
cleanup() {
    local m
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null; done
    if [ $keep = 1 ]; then echo "kept $root"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
failures=()
step() {  # step NAME COMMAND...: run, time, record
    local name=$1; shift
    local t0=$SECONDS
    echo "=== $name"
    "$@"
    local rc=$?
    if [ $rc -eq 0 ]; then echo "=== PASS $name ($((SECONDS - t0)) s)"; else echo "=== FAIL $name (exit $rc, $((SECONDS - t0)) s)"; failures+=("$name"); fi
    return $rc
}

# 1. the fresh system
bootstrap() {
    debootstrap --variant=minbase --include=git,make,ca-certificates bookworm "$root" "$mirror" >"$root.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || tail -20 "$root.log"
    rm -f "$root.log"
    return $rc
}
step "debootstrap bookworm minbase + git make ca-certificates" bootstrap || exit 1
mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --rbind /dev "$root/dev" && mounted+=("$root/dev")
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
chroot "$root" useradd -m newcomer
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 /bin/bash -c "$1"; }
as_user() { chroot "$root" /usr/bin/env -i HOME=/home/newcomer PATH=/usr/bin:/bin LANG=C.UTF-8 /usr/sbin/runuser -u newcomer -- /bin/bash -c "$1"; }
for tool in g++ c++ gcc; do in_root "command -v $tool" >/dev/null && { echo "error: the fresh system already has $tool"; exit 1; }; done

# 2. the clone (what a user gets from the repository: HEAD, committed files only)
git clone -q "$repo" "$root/home/newcomer/icl" || exit 1
chroot "$root" chown -R newcomer:newcomer /home/newcomer/icl

# 3. non-root: one line, the complete command, no sudo, non-zero exit, nothing built
check_nonroot() {
    local out rc
    out=$(as_user "cd ~/icl && make test" 2>&1); rc=$?
    echo "$out"
    [ $rc -ne 0 ] || { echo "expected a non-zero exit"; return 1; }
    echo "$out" | grep -q "as root, run: apt-get update && apt-get install -y g++ .*python3-numpy" || { echo "the install command is missing"; return 1; }
    ! echo "$out" | grep -q sudo || { echo "the message assumes sudo"; return 1; }
    [ ! -e "$root/home/newcomer/icl/build/test_icl" ] || { echo "something was built"; return 1; }
}
step "make test as a non-root user prints the install command" check_nonroot

# 4. root: make test installs everything, compiler included, and passes
check_root_test() {
    in_root "cd /home/newcomer/icl && make test 2>&1 | tee /tmp/make_test.log | grep -E '^(installing|error|tests:)|FAILED|ERROR'; exit \${PIPESTATUS[0]}"
}
step "make test as root (installs the compiler and libraries)" check_root_test
grep -E "^\[doctest\] test cases" "$root/tmp/make_test.log" 2>/dev/null
[ -e "$root/dev/full" ] && [ ! -c "$root/dev/full" ] && { echo "FAIL: /dev/full in the fresh system is not a device any more"; failures+=("/dev/full"); }

# 5. root: a short make run (the same preset, a few steps)
step "make run (make-run preset, 30 steps, 64 evaluation sequences)" \
    in_root "cd /home/newcomer/icl && make run RUN_ARGS='--steps 30 --eval-every 30 --eval-seqs 64 --out /tmp/makerun' >/tmp/make_run.log 2>&1 && test -s /tmp/makerun/table.md && tail -15 /tmp/make_run.log"

echo
if [ ${#failures[@]} -eq 0 ]; then echo "fresh_machine_test: every step passed"; exit 0; fi
echo "fresh_machine_test: ${#failures[@]} step(s) failed: ${failures[*]}"
exit 1
