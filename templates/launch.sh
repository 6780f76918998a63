# launch.sh (rendered by tpujob): start the job's program on this host, detached, and return.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
workdir={{workdir}}
command={{command}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
# Relative paths are taken from the home, and so is a leading ~/ (see setup.sh).
case $workdir in "~") workdir=$HOME ;; "~/"*) workdir=$HOME/${workdir#"~/"} ;; /*) ;; *) workdir=$HOME/$workdir ;; esac
attempt_dir=$job_dir/attempt-$attempt

# The environment (runtime contract, the spec's env, secrets) arrives on stdin as NUL-separated
# NAME=VALUE pairs: never on a command line, in a file or in a log.
while IFS= read -r -d '' pair; do export "$pair"; done

# A process group is alive while a member is not a zombie: an init that does not reap
# (containers, the emulator) leaves exited members behind, and `kill -0` counts those.
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }

# Launching the same attempt twice is a no-op: the first launch is the one running.
if [ -f "$attempt_dir/program.pid" ] && group_alive "$(cat "$attempt_dir/program.pid")"; then
  printf '{"state": "running", "pid": %d}\n' "$(cat "$attempt_dir/program.pid")"
  exit 0
fi
# What earlier attempts left on this host (their programs, a held TPU, libtpu's lock) was ended
# by clean.sh just before: tpujob runs it before every launch.
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
