# mount_bucket.sh (rendered by tpujob): mount a Cloud Storage bucket with gcsfuse; idempotent.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
bucket={{bucket}}
mount_point={{mount_point}}
read_only={{read_only}}
metadata_ttl={{metadata_ttl}}
only_dir={{only_dir}}
cache_dir={{cache_dir}}
file_cache_mb={{file_cache_mb}}
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
# File cache (gcsfuse v2): on only with a cache dir; its size limit defaults to the disk's room.
if [ -n "$cache_dir" ]; then
  args+=(--cache-dir "$cache_dir")
  if [ -n "$file_cache_mb" ]; then args+=(--file-cache-max-size-mb "$file_cache_mb"); fi
  $sudo_ mkdir -p "$cache_dir"
  $sudo_ chown "$(id -u):$(id -g)" "$cache_dir"
fi
$sudo_ mkdir -p "$mount_point"
$sudo_ chown "$(id -u):$(id -g)" "$mount_point"
gcsfuse "${args[@]}" "$bucket" "$mount_point"
echo "tpujob: mounted gs://$bucket at $mount_point"
