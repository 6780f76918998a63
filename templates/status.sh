# status.sh (rendered by tpujob): one JSON line about the program of this attempt on this host:
# state absent (never launched) | running | exited (exit_code set) | lost (gone without one).
# Every {{name}} below is replaced by a shell-quoted value; nothing else is substituted.
set -uo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
attempt_dir=$job_dir/attempt-$attempt

state=absent; pid=null; code=null; log_bytes=0
if [ -f "$attempt_dir/program.pid" ]; then
  pid=$(cat "$attempt_dir/program.pid")
  [[ $pid =~ ^[0-9]+$ ]] || pid=null
  if [ "$pid" != null ] && kill -0 -- "-$pid" 2>/dev/null; then
    state=running
  elif [ -f "$attempt_dir/exit_code" ]; then
    state=exited
    code=$(cat "$attempt_dir/exit_code")
    [[ $code =~ ^[0-9]+$ ]] || code=null
  else
    state=lost
  fi
fi
[ -f "$attempt_dir/program.log" ] && log_bytes=$(stat -c %s "$attempt_dir/program.log")
printf '{"state": "%s", "pid": %s, "exit_code": %s, "log_bytes": %s}\n' \
  "$state" "$pid" "$code" "$log_bytes"
