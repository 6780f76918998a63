# stacks.sh (rendered by tpujob): before a hung program is ended, ask each of its processes
# that catches SIGUSR1 for its Python stacks, then print what its log gained since.
# The bundled runtime registers faulthandler on SIGUSR1 (a C handler: it runs even while the
# main thread is blocked in a collective); a user's Python program can do the same
# (docs/runtime.md). A process that does not catch SIGUSR1 is left alone: the signal's default
# action would kill it. A stopped process (SIGSTOP) runs its handler only once continued, so it
# is continued right after the signal: its stacks are where it stood, and it is ended next.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -uo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
wait_tenths={{wait_tenths}}
max_bytes={{max_bytes}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
attempt_dir=$job_dir/attempt-$attempt
log=$attempt_dir/program.log

if [ ! -f "$attempt_dir/program.pid" ]; then echo "tpujob: no program launched here"; exit 0; fi
pgid=$(cat "$attempt_dir/program.pid")
if ! [[ $pgid =~ ^[0-9]+$ ]]; then echo "tpujob: program.pid holds no pid"; exit 0; fi
before=$(stat -c %s "$log" 2>/dev/null || echo 0)
asked=0 continued=0
for pid in $(ps -e -o pid=,pgid= | awk -v g="$pgid" '$2 == g { print $1 }'); do
  caught=$(awk '/^SigCgt:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || continue
  [ -n "$caught" ] && (( (16#$caught >> 9) & 1 )) || continue   # bit 9: SIGUSR1 (10)
  kill -USR1 "$pid" 2>/dev/null || continue
  asked=$((asked + 1))
  if awk '/^State:/ { exit ($2 == "T" ? 0 : 1) }' "/proc/$pid/status" 2>/dev/null; then
    kill -CONT "$pid" 2>/dev/null && continued=$((continued + 1))
  fi
done
if [ "$asked" = 0 ]; then
  echo "tpujob: no process of the program catches SIGUSR1 (faulthandler.register): no stacks"
  exit 0
fi
for _ in $(seq "$wait_tenths"); do sleep 0.1; done
echo "tpujob: $asked processes asked for their stacks (SIGUSR1), $continued of them stopped and continued"
size=$(stat -c %s "$log" 2>/dev/null || echo 0)
if [ "$size" -gt "$before" ]; then
  tail -c "+$((before + 1))" "$log" | head -c "$size" | tail -c "$max_bytes"
fi
