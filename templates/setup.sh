# setup.sh (rendered by tpujob): run the job's setup command once per attempt on this host.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
job_dir={{job_dir}}
attempt={{attempt}}
workdir={{workdir}}
command={{command}}
case $job_dir in /*) ;; *) job_dir=$HOME/$job_dir ;; esac
case $workdir in /*) ;; *) workdir=$HOME/$workdir ;; esac
attempt_dir=$job_dir/attempt-$attempt

# The environment arrives on stdin as NUL-separated NAME=VALUE pairs (see launch.sh).
while IFS= read -r -d '' pair; do export "$pair"; done

mkdir -p "$attempt_dir" "$workdir"
if [ -f "$attempt_dir/setup.done" ]; then
  echo "tpujob: setup already done for attempt $attempt"
  exit 0
fi
cd "$workdir"
bash -c "$command" < /dev/null
touch "$attempt_dir/setup.done"
