#!/usr/bin/env bash
# Fails (exit 1) when tests left anything behind: a server process (postgres, redis-server,
# etcd, kube-apiserver, ...) working in or naming a folder under internal/testenv's root
# ($TMPDIR/callback-platform-testenv), or any folder in that root. The Makefile runs it after
# `make test`; run it by hand after killing a test binary to see what the next run will reap.
set -euo pipefail

root="${TMPDIR:-/tmp}"
root="${root%/}/callback-platform-testenv"

stray=0
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  [ "$pid" = "$$" ] && continue
  cwd=$(readlink "$p/cwd" 2>/dev/null || true)
  cmd=$( { tr '\0' ' ' < "$p/cmdline"; } 2>/dev/null || true)
  case "$cwd/ $cmd" in
    *"$root/"*)
      [ -z "$cmd" ] && continue # a zombie about to be reaped by its parent
      echo "check-leftovers: stray process $pid (cwd ${cwd:-?}): ${cmd:0:200}" >&2
      stray=1
      ;;
  esac
done

if [ -d "$root" ] && [ -n "$(ls -A "$root" 2>/dev/null)" ]; then
  for d in "$root"/*; do
    echo "check-leftovers: leftover folder $d" >&2
  done
  stray=1
fi

if [ "$stray" -ne 0 ]; then
  echo "check-leftovers: FAIL (the next test run reaps folders of dead test binaries; to clean by hand: kill the pids above, rm -rf $root)" >&2
  exit 1
fi
echo "check-leftovers: no stray server processes, no leftover folders under $root"
