# mount_bucket.sh (rendered by tpujob): mount a Cloud Storage bucket with gcsfuse; idempotent.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
bucket={{bucket}}
mount_point={{mount_point}}
read_only={{read_only}}
metadata_ttl={{metadata_ttl}}
only_dir={{only_dir}}
sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo -n"

if mountpoint -q "$mount_point"; then echo "tpujob: $mount_point already mounted"; exit 0; fi
if ! command -v gcsfuse > /dev/null; then
  # Google's apt repository for gcsfuse (TPU VM images do not ship it).
  release=$(lsb_release -c -s)
  curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg \
    | $sudo_ tee /usr/share/keyrings/cloud.google.asc > /dev/null
  echo "deb [signed-by=/usr/share/keyrings/cloud.google.asc] https://packages.cloud.google.com/apt gcsfuse-$release main" \
    | $sudo_ tee /etc/apt/sources.list.d/gcsfuse.list > /dev/null
  $sudo_ apt-get update -q && $sudo_ apt-get install -y -q gcsfuse
fi
args=(--implicit-dirs --metadata-cache-ttl-secs "$metadata_ttl")
# Checkpointers (Orbax) write a temporary directory and rename it when complete: gcsfuse
# renames directories (copy, then delete) only up to this many objects.
if [ "$read_only" = 1 ]; then args+=(-o ro); else args+=(--rename-dir-limit 100000); fi
if [ -n "$only_dir" ]; then args+=(--only-dir "$only_dir"); fi
$sudo_ mkdir -p "$mount_point"
$sudo_ chown "$(id -u):$(id -g)" "$mount_point"
gcsfuse "${args[@]}" "$bucket" "$mount_point"
echo "tpujob: mounted gs://$bucket at $mount_point"
