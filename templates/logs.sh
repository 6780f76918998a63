# logs.sh (rendered by tpujob): print the program's log of one attempt on this host; with
# follow=1, tail it until the program ends (exit_code written, or its process group gone) or
# the client goes away (EOF on stdin, which tpujob keeps open while following).
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -u
job_dir={{job_dir}}
attempt={{attempt}}
follow={{follow}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
dir=$job_dir/attempt-$attempt
log=$dir/program.log
if [ ! -f "$log" ]; then echo "no program log at $log" >&2; exit 66; fi
[ "$follow" = 1 ] || exec cat -- "$log"
group_alive() { ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }
tail -n +1 -F -- "$log" 2>/dev/null & tailer=$!
exec 3<&0
cat <&3 >/dev/null & reader=$!
while kill -0 "$reader" 2>/dev/null && [ ! -f "$dir/exit_code" ] \
      && group_alive "$(cat "$dir/program.pid" 2>/dev/null)"; do
  sleep 0.5
done
sleep 1   # tail's last lines
kill "$tailer" "$reader" 2>/dev/null
exit 0
