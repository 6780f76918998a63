# runtime.sh (rendered by tpujob): the bundled training runtime as the job's program. Its
# package and config were synced to bundle_dir (relative to the home); launch.sh runs this.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
bundle_dir={{bundle_dir}}
config={{config}}
case $bundle_dir in /*) ;; *) bundle_dir=$HOME/$bundle_dir ;; esac
cd "$bundle_dir"
# The shipped package first (the runtime imports nothing else from tpujob), then whatever the
# image puts on PYTHONPATH (its own packages, a sitecustomize), which a user's program keeps too.
PYTHONPATH=$bundle_dir${PYTHONPATH:+:$PYTHONPATH} exec python3 -m tpujob.runtime "$config"
