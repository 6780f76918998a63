# stop_group.sh (put by tpujob before stop.sh and clean.sh): how a program is stopped, the one
# home of it. Defines functions only; it has no placeholders.

# A process group is alive while a member is not a zombie: an init that does not reap
# (containers, the emulator) leaves exited members behind, and `kill -0` counts those.
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }

# stop_group PGID TENTHS: SIGTERM the program's process group, up to TENTHS tenths of a second
# for it to end (a SIGTERM checkpoint), then SIGKILL (stuck processes ignore SIGTERM) and up to
# 5 s for that to take, as SIGKILL is not instant. Prints "stopped" or "killed"; returns 1 when
# the group survived SIGKILL.
stop_group() {
  kill -TERM -- "-$1" 2>/dev/null
  for _ in $(seq "$2"); do
    group_alive "$1" || { echo stopped; return 0; }
    sleep 0.1
  done
  kill -KILL -- "-$1" 2>/dev/null
  for _ in $(seq 50); do
    group_alive "$1" || { echo killed; return 0; }
    sleep 0.1
  done
  return 1
}
