# stop.sh (rendered by tpujob): SIGTERM the program's process group, a grace period, SIGKILL.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -uo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
grace_tenths={{grace_tenths}}
# A process group is alive while a member is not a zombie: an init that does not reap
# (containers, the emulator) leaves exited members behind, and `kill -0` counts those.
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }
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
kill -TERM -- "-$pid" 2>/dev/null
for _ in $(seq "$grace_tenths"); do
  group_alive "$pid" || { printf '{"state": "stopped", "pid": %d}\n' "$pid"; exit 0; }
  sleep 0.1
done
kill -KILL -- "-$pid" 2>/dev/null
for _ in $(seq 50); do  # SIGKILL is not instant: make sure it took before saying so
  group_alive "$pid" || { printf '{"state": "killed", "pid": %d}\n' "$pid"; exit 0; }
  sleep 0.1
done
echo "tpujob: process group $pid survived SIGKILL" >&2
exit 1
