#!/usr/bin/env bash
# Fails (exit 1) when finished tests left anything behind under internal/testenv's root
# ($TMPDIR/callback-platform-testenv): a server process (postgres, redis-server, etcd,
# kube-apiserver, ...) working in or naming a folder there, or a folder there.
#
# Every server folder is named <pid>-<n> after the test binary that owns it and holds an "owner"
# file ("<pid> <start time>"). A folder whose owner is still running belongs to a test that is
# in progress (another `go test` on the same machine), not to a finished run: it is listed but
# does not fail the check. After `make test` every test binary has exited, so anything found is
# a leftover. The Makefile runs this after `make test`.
set -euo pipefail

root="${TMPDIR:-/tmp}"
root="${root%/}/callback-platform-testenv"

# start_time PID prints field 22 of /proc/PID/stat (clock ticks since boot), or nothing.
start_time() {
  local stat
  stat=$( { cat "/proc/$1/stat"; } 2>/dev/null ) || return 0
  stat=${stat##*) } # drop "pid (comm) ", the command may contain spaces
  # shellcheck disable=SC2086
  set -- $stat
  echo "${20:-}" # field 22 overall is the 20th after "pid (comm)"
}

# owner_alive FOLDER succeeds when the test binary that created FOLDER is still running.
owner_alive() {
  local dir=$1 name pid recorded
  name=$(basename "$dir")
  pid=${name%%-*}
  case "$pid" in '' | *[!0-9]*) return 1 ;; esac
  [ -d "/proc/$pid" ] || return 1
  recorded=$(awk '{print $2}' "$dir/owner" 2>/dev/null || true)
  # Without a recorded start time the owner may still be writing it: treat as alive.
  [ -z "$recorded" ] || [ "$recorded" = "$(start_time "$pid")" ]
}

# folder_of PATH prints the server folder (root/<pid>-<n>) that PATH lies in, if any.
folder_of() {
  local rest=${1#"$root"/}
  [ "$rest" != "$1" ] || return 0
  echo "$root/${rest%%/*}"
}

stray=0
in_use=()
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  [ "$pid" = "$$" ] && continue
  cwd=$(readlink "$p/cwd" 2>/dev/null || true)
  cmd=$( { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null || true)
  [ -n "$cmd" ] || continue # kernel thread, or a zombie about to be reaped by its parent
  where=""
  case "$cwd/" in "$root"/*) where=$cwd ;; esac
  if [ -z "$where" ]; then
    for arg in $cmd; do
      arg=${arg#*=}
      case "$arg" in "$root"/*) where=$arg; break ;; esac
    done
  fi
  [ -n "$where" ] || continue
  folder=$(folder_of "${where% (deleted)}")
  if [ -n "$folder" ] && owner_alive "$folder"; then
    in_use+=("$folder")
    continue
  fi
  echo "check-leftovers: stray process $pid (cwd ${cwd:-?}): ${cmd:0:200}" >&2
  stray=1
done

if [ -d "$root" ]; then
  for d in "$root"/* "$root"/.[!.]*; do
    [ -e "$d" ] || continue
    if owner_alive "$d"; then
      in_use+=("$d")
      continue
    fi
    echo "check-leftovers: leftover folder $d" >&2
    stray=1
  done
fi

if [ ${#in_use[@]} -gt 0 ]; then
  printf '%s\n' "${in_use[@]}" | sort -u | while read -r d; do
    echo "check-leftovers: in use by a running test binary (not a leftover): $d" >&2
  done
fi

if [ "$stray" -ne 0 ]; then
  echo "check-leftovers: FAIL (the next test run reaps what dead test binaries left; by hand: kill the pids above, then remove the folders)" >&2
  exit 1
fi
echo "check-leftovers: no stray server processes, no leftover folders under $root"
