# running.sh (rendered by tpujob gc): prints "running" when a tpujob program runs on this host,
# under any job and attempt (a live process group recorded in .tpujob/jobs/*/attempt-*/program.pid
# under the login's home, launch.sh's layout), "idle" otherwise. `tpujob gc` asks it before
# deleting a slice another store may still be using.
set -uo pipefail
# A process group is alive while a member is not a zombie (as in status.sh).
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }
for pid_file in "$HOME"/.tpujob/jobs/*/attempt-*/program.pid; do
  [ -f "$pid_file" ] || continue
  pid=$(cat "$pid_file")
  [[ $pid =~ ^[0-9]+$ ]] || continue
  if group_alive "$pid"; then
    echo running
    exit 0
  fi
done
echo idle
