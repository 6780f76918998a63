# clean.sh (rendered by tpujob): make this host fit for a launch (a reused slice, a failed
# attempt before): end the programs earlier attempts of the job left, and every process holding
# an accelerator device, wait for them to let go, and remove libtpu's lock. A TPU still held
# makes the next program fail ("The TPU is already in use by process with pid N", "Couldn't
# open iommu group": jax-ml/jax#22070, marin-community/marin#2618; tpujob/hosts/bad_host.py).
# Prints one JSON line: the pids ended, and those still holding a device afterwards.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -uo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
grace_tenths={{grace_tenths}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo -n"

ended=()

# Earlier attempts' programs, stopped as stop.sh stops one (stop_group.sh, put before this
# script). This attempt's own is left alone: launching it twice is a no-op.
for pidfile in "$job_dir"/attempt-*/program.pid; do
  [ -f "$pidfile" ] && [ "$pidfile" != "$job_dir/attempt-$attempt/program.pid" ] || continue
  pid=$(cat "$pidfile")
  [[ $pid =~ ^[0-9]+$ ]] && group_alive "$pid" || continue
  stop_group "$pid" "$grace_tenths" > /dev/null
  ended+=("$pid")
done

# The accelerator's device files: /dev/accel* up to v4, /dev/vfio/* from v5 (google/maxtext
# multihost_runner.py). A holder is a process with one of them open, found by its
# /proc/PID/fd links (marin's cleanup.py does the same) and told by the file's identity
# (device:inode), not its name: the same name may be another file in another mount namespace.
devices=()
for d in /dev/accel* /dev/vfio/*; do [ -e "$d" ] && devices+=("$d"); done
holders() {
  [ ${#devices[@]} -gt 0 ] || return 0
  local ids
  ids=$(stat -L -c '%d:%i' "${devices[@]}" 2>/dev/null | sort -u)
  $sudo_ find /proc/[0-9]*/fd -maxdepth 1 \( -lname '/dev/accel*' -o -lname '/dev/vfio/*' \) -print0 2>/dev/null \
    | $sudo_ xargs -0 -r stat -L -c '%d:%i %n' 2>/dev/null \
    | while read -r id path; do
        if grep -qxF "$id" <<< "$ids"; then path=${path#/proc/}; echo "${path%%/*}"; fi
      done | sort -un | grep -vx "$$"
}
# This attempt's own program, when it runs already (a launch retried after a sweep died), is
# the TPU's rightful user: its process group is left alone.
own=""
mine=$job_dir/attempt-$attempt/program.pid
if [ -f "$mine" ] && [[ $(cat "$mine") =~ ^[0-9]+$ ]] && group_alive "$(cat "$mine")"; then own=$(cat "$mine"); fi
others() { holders | while read -r pid; do [ "$(ps -o pgid= -p "$pid" | tr -d ' ')" = "$own" ] || echo "$pid"; done; }
# SIGKILL by device holder (not by name: a venv's interpreter is `python`, not `python3`), then
# wait until each has let go (dead, or a zombie: its files are closed either way).
for pid in $(others); do
  $sudo_ kill -KILL "$pid" 2>/dev/null && ended+=("$pid")
done
held=""
for _ in $(seq 50); do
  held=$(others | paste -sd, -)
  [ -z "$held" ] && break
  sleep 0.1
done
# libtpu's lock: safe to remove once no process uses the TPU (stanford-crfm/levanter).
$sudo_ rm -f /tmp/libtpu_lockfile || true
printf '{"ended": [%s], "held": [%s]}\n' "$(IFS=,; echo "${ended[*]}")" "$held"
