# setup.sh (rendered by tpujob): prepare this host for one attempt, once: tpujob's own steps
# (the attempt's and run directories, the bundled runtime's packages), then the job's setup
# command as the user wrote it.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
workdir={{workdir}}
run_dir={{run_dir}}
runtime_modules={{runtime_modules}}
runtime_packages={{runtime_packages}}
command={{command}}
timeout_seconds={{timeout_seconds}}
cache_paths={{cache_paths}}
cache_archive={{cache_archive}}
cache_digest={{cache_digest}}
# Relative paths are taken from the home, and so is a leading ~/ (quoted in the spec, the shell
# would not expand it).
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
case $workdir in "~") workdir=$HOME ;; "~/"*) workdir=$HOME/${workdir#"~/"} ;; /*) ;; *) workdir=$HOME/$workdir ;; esac
attempt_dir=$job_dir/attempt-$attempt

# The environment arrives on stdin as NUL-separated NAME=VALUE pairs (see launch.sh).
while IFS= read -r -d '' pair; do export "$pair"; done

mkdir -p "$attempt_dir" "$workdir"
# One setup of an attempt at a time: a sweep that died in the middle of one leaves it running
# here (nothing stops a command whose SSH client went away), and the next sweep's setup waits
# for it, within the setup timeout, then finds it done or runs it again (flock(1), util-linux).
exec 9> "$attempt_dir/setup.lock"
lock_wait=(); [ "$timeout_seconds" = 0 ] || lock_wait=(-w "$timeout_seconds")
if ! flock "${lock_wait[@]}" 9; then
  echo "tpujob: an earlier setup of attempt $attempt is still running after ${timeout_seconds}s" >&2
  exit 124
fi
if [ -f "$attempt_dir/setup.done" ]; then
  echo "tpujob: setup already done for attempt $attempt"
  exit 0
fi
# tpujob's own steps: any failure ends the setup here (set -e), as a setup failure, saying
# which step it was after the step's own words.
trap 'rc=$?; echo "tpujob: setup failed at: $BASH_COMMAND (exit $rc)" >&2' ERR
# The run dir must exist before the program writes its heartbeat there.
mkdir -p "$run_dir"
if [ -n "$runtime_packages" ]; then
  read -r -a modules <<< "$runtime_modules"
  read -r -a packages <<< "$runtime_packages"
  # Found, not imported: importing jax costs seconds on every host of every attempt (7 s on a
  # loaded emulator host, against 0.1 s), and the program imports it a moment later anyway,
  # saying why where an installed package is broken.
  if ! python3 -c 'import importlib.util, sys; sys.exit(not all(importlib.util.find_spec(m) for m in sys.argv[1:]))' \
       "${modules[@]}" 2> /dev/null; then
    echo "tpujob: installing the runtime's packages: ${packages[*]}"
    python3 -m pip install --user --quiet "${packages[@]}"
  fi
fi

# The setup cache (setup: {cache: [...]}): an archive of the cached paths under this setup's key
# (`cache_archive`, without its extension, in the run dir's bucket) stands in for running it.
# It is unpacked at / as code is run, so only an archive whose sha256 is the one its maker
# reported (`cache_digest`, kept in tpujob's store) is: anyone who can write the bucket could
# have replaced it. One that does not match, or that has no recorded digest, is refused, and the
# setup runs instead (the setup, not the cache, is the truth; failing the job instead would let
# a bucket writer stop every job); host 0 then stores its own in the refused one's place.
# What happened goes to setup.cache, one line of fixed words that setup_state.sh reports.
cache_note() { printf '%s\n' "$*" > "$attempt_dir/setup.cache"; }
since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
refused=""
if [ -n "$cache_archive" ]; then
  archive=""
  if [ -f "$cache_archive.tar.zst" ] && command -v zstd > /dev/null; then archive=$cache_archive.tar.zst; unpack=(zstd -d -q -c)
  elif [ -f "$cache_archive.tar.gz" ]; then archive=$cache_archive.tar.gz; unpack=(gzip -d -c)
  fi
  if [ -z "$archive" ]; then
    cache_note miss absent
  elif [ -z "$cache_digest" ]; then
    refused=$archive
    cache_note miss unverified
    echo "tpujob: setup cache: no digest of $archive is recorded (stored by an older tpujob, or its report was lost): not trusted; running the setup" >&2
  else
    started=$(date +%s.%N)
    # A private copy is checked and unpacked: the bucket's object may change between the two.
    copy=$(mktemp -d)
    trap 'rm -rf "$copy"' EXIT
    found=""
    cp "$archive" "$copy/archive" && found=$(sha256sum < "$copy/archive" | cut -c1-64) || true
    if [ -z "$found" ]; then
      cache_note miss unpack-failed
      echo "tpujob: setup cache: reading $archive failed; running the setup" >&2
    elif [ "$found" != "$cache_digest" ]; then
      refused=$archive
      cache_note miss mismatch
      echo "tpujob: setup cache: $archive refused: its sha256 is $found, not $cache_digest as recorded when it was stored (changed since); running the setup" >&2
    elif "${unpack[@]}" "$copy/archive" | tar -x -f - -C /; then
      cache_note hit "$(since "$started")"
      echo "tpujob: setup cache: unpacked $archive (sha256 verified) instead of running the setup"
      touch "$attempt_dir/setup.done"
      exit 0
    else
      cache_note miss unpack-failed
      echo "tpujob: setup cache: unpacking $archive failed; running the setup" >&2
    fi
    rm -rf "$copy"
  fi
fi

# The job's setup, as written (no set -e imposed on it), bounded by the job's setup timeout
# (0: none): timeout(1) kills it and its children, so a hung setup cannot outlive the attempt.
cd "$workdir"
trap - ERR
rc=0
# Not holding the lock (9>&-): a daemon the command leaves behind must not keep it.
timeout --kill-after=10 "$timeout_seconds" bash -c "$command" < /dev/null 9>&- || rc=$?
if [ "$rc" = 124 ]; then
  echo "tpujob: setup timed out after ${timeout_seconds}s" >&2
  exit 124
fi
if [ "$rc" != 0 ]; then
  echo "tpujob: the job's setup command exited $rc" >&2
  exit "$rc"
fi
# Host 0 packs the cached paths once (tar, then zstd where the image has it, else gzip) where
# there is no archive, or in place of the one it refused; locally first, where its sha256 is
# taken (reported in setup.cache, recorded by tpujob with the key), then under a temporary name
# in the bucket: no host ever unpacks half an archive. Relative paths are the home's.
if [ -n "$cache_archive" ] && [ "${TPUJOB_HOST_INDEX:-0}" = 0 ] && { [ -n "$refused" ] \
    || { [ ! -f "$cache_archive.tar.zst" ] && [ ! -f "$cache_archive.tar.gz" ]; }; }; then
  members=()
  while IFS= read -r path; do
    [ -n "$path" ] || continue
    case $path in "~") path=$HOME ;; "~/"*) path=$HOME/${path#"~/"} ;; /*) ;; *) path=$HOME/$path ;; esac
    members+=("${path#/}")
  done <<< "$cache_paths"
  if command -v zstd > /dev/null; then ext=tar.zst; pack=(zstd -q -T0 -c); else ext=tar.gz; pack=(gzip -c); fi
  started=$(date +%s.%N)
  tmp=$cache_archive.$ext.tmp-$$
  local_copy=""
  if local_copy=$(mktemp) && mkdir -p "$(dirname "$cache_archive")" \
      && tar -c -f - -C / "${members[@]}" | "${pack[@]}" > "$local_copy" \
      && digest=$(sha256sum < "$local_copy" | cut -c1-64) && { [ -z "$refused" ] || rm -f "$refused"; } \
      && cp "$local_copy" "$tmp" && mv "$tmp" "$cache_archive.$ext"; then
    cache_note "$(cat "$attempt_dir/setup.cache" 2> /dev/null)" stored "$(since "$started")" sha256 "$digest" \
      key "${cache_archive##*/}"
  else
    rm -f "$tmp"
    cache_note "$(cat "$attempt_dir/setup.cache" 2> /dev/null)" store-failed
    echo "tpujob: setup cache: packing ${members[*]} failed (the setup itself succeeded)" >&2
  fi
  [ -z "$local_copy" ] || rm -f "$local_copy"
fi
touch "$attempt_dir/setup.done"
