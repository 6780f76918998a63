# launch.sh (rendered by tpujob): start the job's program on this host, detached, and return.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
workdir={{workdir}}
command={{command}}
stale_grace_tenths={{stale_grace_tenths}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
# Relative paths are taken from the home, and so is a leading ~/ (see setup.sh).
case $workdir in "~") workdir=$HOME ;; "~/"*) workdir=$HOME/${workdir#"~/"} ;; /*) ;; *) workdir=$HOME/$workdir ;; esac
attempt_dir=$job_dir/attempt-$attempt
sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo -n"

# The environment (runtime contract, the spec's env, secrets) arrives on stdin as NUL-separated
# NAME=VALUE pairs: never on a command line, in a file or in a log.
while IFS= read -r -d '' pair; do export "$pair"; done

# A process group is alive while a member is not a zombie: an init that does not reap
# (containers, the emulator) leaves exited members behind, and `kill -0` counts those.
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }
stop_group() {  # SIGTERM, a grace period, then SIGKILL
  kill -TERM -- "-$1" 2>/dev/null || return 0
  for _ in $(seq "$stale_grace_tenths"); do group_alive "$1" || return 0; sleep 0.1; done
  kill -KILL -- "-$1" 2>/dev/null || true
}

# Launching the same attempt twice is a no-op: the first launch is the one running.
if [ -f "$attempt_dir/program.pid" ] && group_alive "$(cat "$attempt_dir/program.pid")"; then
  printf '{"state": "running", "pid": %d}\n' "$(cat "$attempt_dir/program.pid")"
  exit 0
fi
# What an earlier attempt left running on this host.
for pidfile in "$job_dir"/attempt-*/program.pid; do
  if [ -f "$pidfile" ]; then stop_group "$(cat "$pidfile")"; fi
done
# Stale TPU users (holding /dev/accel* or /dev/vfio/*) and libtpu's lock: a new program can't
# open the TPU while they remain.
if compgen -G '/dev/accel*' > /dev/null || [ -d /dev/vfio ]; then
  for pid in $($sudo_ find /proc/[0-9]*/fd -maxdepth 1 \( -lname '/dev/accel*' -o -lname '/dev/vfio/*' \) 2>/dev/null | cut -d/ -f3 | sort -u); do
    [ "$pid" = $$ ] || $sudo_ kill -KILL "$pid" 2>/dev/null || true
  done
fi
$sudo_ rm -f /tmp/libtpu_lockfile || true

mkdir -p "$attempt_dir" "$workdir"
rm -f "$attempt_dir/exit_code"
cd "$workdir"
# The wrapper leads its own session (setsid), so the program outlives this SSH session and
# stop.sh can signal the whole process group; it records the exit code when the program ends.
# `trap : TERM` lets it outlive a SIGTERM to the group long enough to write that code.
wrapper='trap : TERM; bash -c "$1"; rc=$?; printf "%s\n" "$rc" > "$2.tmp"; mv "$2.tmp" "$2"'
setsid bash -c "$wrapper" tpujob-program "$command" "$attempt_dir/exit_code" \
  > "$attempt_dir/program.log" 2>&1 < /dev/null &
echo $! > "$attempt_dir/program.pid"
printf '{"state": "started", "pid": %d}\n' "$!"
