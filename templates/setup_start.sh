# setup_start.sh (rendered by tpujob): start this attempt's setup (setup.sh, rendered, in
# `script`) detached on this host, and return at once with one JSON line about it, as
# setup_state.sh prints: the sweep does not wait for a setup (it observes it in later rounds).
# Starting it again is a no-op while it runs or once it ended: one setup per attempt and host.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
script={{script}}
wait_tenths={{wait_tenths}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
attempt_dir=$job_dir/attempt-$attempt
# One JSON line, as setup_state.sh's (setup.sh's note on the setup cache with it).
report() {
  local cache=""
  [ -f "$attempt_dir/setup.cache" ] && cache=$(tr -cd '[:alnum:] ._-' < "$attempt_dir/setup.cache")
  printf '{"setup": "%s", "cache": "%s"}\n' "$1" "$cache"
}
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }

# The environment arrives on stdin as NUL-separated NAME=VALUE pairs (see launch.sh); the
# detached setup inherits it, never from a file.
while IFS= read -r -d '' pair; do export "$pair"; done

mkdir -p "$attempt_dir"
if [ -f "$attempt_dir/setup.done" ]; then report done; exit 0; fi
if [ -f "$attempt_dir/setup.exit" ]; then report ended; exit 0; fi
if [ -f "$attempt_dir/setup.pid" ] && group_alive "$(cat "$attempt_dir/setup.pid")"; then
  report running; exit 0
fi
# The setup script is a file, never an argument: an argument is at most 128 KiB on Linux
# (MAX_ARG_STRLEN), and a setup with many quotes, quoted into setup.sh, outgrows it. Private
# (umask 077): the command is the user's, as written.
(umask 077 && printf '%s' "$script" > "$attempt_dir/setup.sh.tmp" && mv "$attempt_dir/setup.sh.tmp" "$attempt_dir/setup.sh")
# The wrapper leads its own session (setsid): the setup outlives this SSH session, and its
# exit code lands in setup.exit when it ends (setup.sh's marker, setup.done, on success).
# setup.sh's own lock (setup.lock) still keeps a second one from running beside it.
wrapper='bash "$1/setup.sh" < /dev/null > "$1/setup.log" 2> "$1/setup.err"; rc=$?; printf "%s\n" "$rc" > "$1/setup.exit.tmp"; mv "$1/setup.exit.tmp" "$1/setup.exit"'
setsid bash -c "$wrapper" tpujob-setup "$attempt_dir" < /dev/null > /dev/null 2>&1 &
echo $! > "$attempt_dir/setup.pid"
# A setup with little to do (none, or a cache hit) is over in a moment: the sweep then launches
# at once instead of a sweep later. Longer ones are left running.
for _ in $(seq "$wait_tenths"); do [ -f "$attempt_dir/setup.exit" ] && break; sleep 0.1; done
if [ -f "$attempt_dir/setup.done" ]; then report done
elif [ -f "$attempt_dir/setup.exit" ]; then report ended
else report running; fi
