# stop.sh (rendered by tpujob): SIGTERM the program's process group, a grace period, SIGKILL.
# Every {{name}} below is replaced by a shell-quoted value; nothing else is substituted.
set -uo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
grace_tenths={{grace_tenths}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
pidfile=$job_dir/attempt-$attempt/program.pid

if [ ! -f "$pidfile" ]; then echo '{"state": "absent"}'; exit 0; fi
pid=$(cat "$pidfile")
if ! kill -0 -- "-$pid" 2>/dev/null; then
  printf '{"state": "exited", "pid": %d}\n' "$pid"; exit 0
fi
kill -TERM -- "-$pid" 2>/dev/null
for _ in $(seq "$grace_tenths"); do
  kill -0 -- "-$pid" 2>/dev/null || { printf '{"state": "stopped", "pid": %d}\n' "$pid"; exit 0; }
  sleep 0.1
done
kill -KILL -- "-$pid" 2>/dev/null
printf '{"state": "killed", "pid": %d}\n' "$pid"
