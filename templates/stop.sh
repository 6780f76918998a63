# stop.sh (rendered by tpujob, after stop_group.sh): stop this attempt's program (stop_group).
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -uo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
grace_tenths={{grace_tenths}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
pidfile=$job_dir/attempt-$attempt/program.pid

if [ ! -f "$pidfile" ]; then echo '{"state": "absent"}'; exit 0; fi
# A pid file that can't be read or holds no pid: the program can't be found to stop, and
# saying "stopped" would be a lie (tpujob refuses the cancel instead).
pid=$(cat "$pidfile") || exit 1
if ! [[ $pid =~ ^[0-9]+$ ]]; then echo "tpujob: $pidfile holds no pid" >&2; exit 1; fi
if ! group_alive "$pid"; then
  printf '{"state": "exited", "pid": %d}\n' "$pid"; exit 0
fi
state=$(stop_group "$pid" "$grace_tenths") || {
  echo "tpujob: process group $pid survived SIGKILL" >&2; exit 1; }
printf '{"state": "%s", "pid": %d}\n' "$state" "$pid"
