# setup_state.sh (rendered by tpujob): one JSON line about this attempt's setup on this host
# (setup_start.sh's layout): absent (never started) | running | done | failed (exit_code set) |
# lost (gone without an exit code); then, for a failed or lost one, the last of what it said
# (its stderr, else its output), for the attempt's cause (tpujob.hosts.host_output).
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -uo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
attempt_dir=$job_dir/attempt-$attempt
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }

# Alive first, files after: a setup that ends between the two looks done or failed, never lost.
alive=0
if [ -f "$attempt_dir/setup.pid" ]; then
  pid=$(cat "$attempt_dir/setup.pid")
  if [[ $pid =~ ^[0-9]+$ ]] && group_alive "$pid"; then alive=1; fi
fi
state=absent; code=null
if [ -f "$attempt_dir/setup.done" ]; then
  state=done; code=0
elif [ -f "$attempt_dir/setup.exit" ]; then
  code=$(cat "$attempt_dir/setup.exit")
  [[ $code =~ ^[0-9]+$ ]] || code=null
  state=failed
elif [ "$alive" = 1 ]; then
  state=running
elif [ -f "$attempt_dir/setup.pid" ]; then
  state=lost
fi
# setup.sh's note on the setup cache: fixed words and numbers only (hit 1.2 | miss absent ...).
cache=""
[ -f "$attempt_dir/setup.cache" ] && cache=$(tr -cd '[:alnum:] ._-' < "$attempt_dir/setup.cache")
printf '{"setup": "%s", "exit_code": %s, "cache": "%s"}\n' "$state" "$code" "$cache"
if [ "$state" = failed ] || [ "$state" = lost ]; then
  if [ -s "$attempt_dir/setup.err" ]; then tail -c 16384 "$attempt_dir/setup.err"
  elif [ -f "$attempt_dir/setup.log" ]; then tail -c 16384 "$attempt_dir/setup.log"; fi
fi
exit 0
