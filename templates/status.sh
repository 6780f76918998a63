# status.sh (rendered by tpujob): one JSON line about the program of this attempt on this host:
# state absent (never launched) | running | exited (exit_code set) | lost (gone without one),
# and, where the program follows the runtime contract, its heartbeat's step, the total it runs
# to and the checkpoint step it resumed from. Where the program ended without a zero exit code (exited non-zero, or
# lost), also when (the exit code's, else the log's, modification time: which host died first)
# and the last tail_bytes of its log, base64 (the log says why: tpujob reads it in the same
# round that sees the end, bounded and masked there). The heartbeat's field names and
# TPUJOB_ATTEMPT are the runtime contract's (tpujob/runtime/contract.py owns them).
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -uo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
run_dir={{run_dir}}
tail_bytes={{tail_bytes}}
ledger_keys={{ledger_keys}}
# A process group is alive while a member is not a zombie: an init that does not reap
# (containers, the emulator) leaves exited members behind, and `kill -0` counts those.
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
attempt_dir=$job_dir/attempt-$attempt

state=absent; pid=null; code=null; log_bytes=0
if [ -f "$attempt_dir/program.pid" ]; then
  pid=$(cat "$attempt_dir/program.pid")
  [[ $pid =~ ^[0-9]+$ ]] || pid=null
  if [ "$pid" != null ] && group_alive "$pid"; then
    state=running
  elif [ -f "$attempt_dir/exit_code" ]; then
    state=exited
    code=$(cat "$attempt_dir/exit_code")
    [[ $code =~ ^[0-9]+$ ]] || code=null
  else
    state=lost
  fi
fi
# How long the log has been silent (a program without a heartbeat is judged hung by it,
# run.hang_seconds), on this host's own clock: no skew between hosts and the orchestrator.
now=$(date +%s); log_age=null
[ -f "$attempt_dir/program.log" ] && log_bytes=$(stat -c %s "$attempt_dir/program.log") \
  && log_age=$(( now - $(stat -c %Y "$attempt_dir/program.log") ))
ended_at=null tail_b64=null
if { [ $state = exited ] && [ "$code" != 0 ]; } || [ $state = lost ]; then
  for f in "$attempt_dir/exit_code" "$attempt_dir/program.log"; do
    if [ -f "$f" ]; then ended_at=$(date -r "$f" +%s.%N); break; fi
  done
  if [ -f "$attempt_dir/program.log" ]; then
    tail_b64=\"$(tail -c "$tail_bytes" "$attempt_dir/program.log" | base64 -w 0)\"
  fi
fi
# The heartbeat is read once, and bounded: on gcsfuse every open and read of it goes to the
# bucket, and this script asks it for a dozen numbers.
heartbeat=""
[ -f "$run_dir/heartbeat" ] && heartbeat=$(head -c 65536 "$run_dir/heartbeat")
# The number after "KEY": in the heartbeat (one line of JSON), or null.
json_int() {
  local pattern="\"$1\": *([0-9]+)"
  if [[ $heartbeat =~ $pattern ]]; then echo "${BASH_REMATCH[1]}"; else echo null; fi
}
# The run dir outlives attempts (on GCS, or on a reused slice): a heartbeat another attempt
# wrote says nothing of this one's progress, and read as this one's it would count the steps
# of the attempt before as this one's (and its resumed-from step too). Whose it is: its
# "attempt" (TPUJOB_ATTEMPT, docs/runtime.md); a program that leaves that out is believed
# only for a heartbeat written since this attempt's launch.
step=null total=null resumed=null progress_age=null reported=null
said=$(json_int attempt)
if [ "$said" = "$attempt" ] || { [ "$said" = null ] && [ -f "$attempt_dir/program.pid" ] \
    && [ "$run_dir/heartbeat" -nt "$attempt_dir/program.pid" ]; }; then
  step=$(json_int step)
  total=$(json_int total)
  resumed=$(json_int resumed_from)
  # Since the heartbeat's step or phase last moved: its writer beats on from a thread while
  # the training loop is blocked (a collective waiting for a frozen peer).
  progress=$(json_int progress_time)
  [ "$progress" != null ] && progress_age=$(( now > progress ? now - progress : 0 ))
  # What only the program knows of where its time went (the ledger's; whole milliseconds).
  pairs=""
  for key in $ledger_keys; do
    value=$(json_int "$key")
    [ "$value" != null ] && pairs="$pairs${pairs:+, }\"$key\": $value"
  done
  [ -n "$pairs" ] && reported="{$pairs}"
fi
printf '{"state": "%s", "pid": %s, "exit_code": %s, "log_bytes": %s, "step": %s, "total": %s, "resumed_from": %s, "log_age": %s, "progress_age": %s, "ended_at": %s, "log_tail": %s, "reported": %s}\n' \
  "$state" "$pid" "$code" "$log_bytes" "$step" "$total" "$resumed" "$log_age" "$progress_age" "$ended_at" "$tail_b64" "$reported"
