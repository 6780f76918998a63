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
# A step that fails under set -e has said why on stderr; this line says which step it was.
trap 'rc=$?; echo "tpujob: mounting gs://$bucket at $mount_point failed at: $BASH_COMMAND (exit $rc)" >&2' ERR

if mountpoint -q "$mount_point"; then echo "tpujob: $mount_point already mounted"; exit 0; fi
if ! command -v gcsfuse > /dev/null; then  # installed already (an image, an earlier attempt): skipped
  # Google's apt repository for gcsfuse (cloud.google.com/storage/docs/cloud-storage-fuse/install;
  # whether TPU VM images ship gcsfuse is unknown, so install it when it is missing).
  release=$(lsb_release -c -s)
  curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg \
    | $sudo_ tee /usr/share/keyrings/cloud.google.asc > /dev/null
  echo "deb [signed-by=/usr/share/keyrings/cloud.google.asc] https://packages.cloud.google.com/apt gcsfuse-$release main" \
    | $sudo_ tee /etc/apt/sources.list.d/gcsfuse.list > /dev/null
  # A fresh TPU VM's unattended-upgrades holds the dpkg lock at first boot: wait for it (apt >=
  # 1.9.11) instead of failing "Could not get lock /var/lib/dpkg/lock-frontend" (exit 100).
  wait_lock=(-o DPkg::Lock::Timeout=300)
  $sudo_ apt-get "${wait_lock[@]}" update -q && $sudo_ apt-get "${wait_lock[@]}" install -y -q gcsfuse
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
# gcsfuse's own words, kept to be repeated on failure: in daemon mode (without --foreground) it
# prints its sub-process's error last, "daemonize.Run: readFromProcess: sub-process: ..."
# (gcsfuse issues #161, #767, PR #1754); its later logs go to syslog (or --log-file).
said=$(mktemp "${TMPDIR:-/tmp}/tpujob-gcsfuse.XXXXXX")
rc=0
gcsfuse "${args[@]}" "$bucket" "$mount_point" > "$said" 2>&1 || rc=$?
if [ "$rc" != 0 ]; then
  grep -v '^[[:space:]]*$' "$said" | tail -n 3 >&2 || true
  # What the usual causes need (gcsfuse's troubleshooting page: a missing bucket, a service
  # account without roles/storage.objectAdmin or a VM without the storage scope, a mount point
  # already mounted or not writable).
  if grep -q -i "bucket doesn't exist\|unknown bucket\|notFound" "$said"; then
    echo "tpujob: bucket gs://$bucket does not exist (or this project cannot see it)" >&2
  elif grep -q -i "Error 403\|forbidden\|permission\|credentials" "$said"; then
    echo "tpujob: the host's service account may not use gs://$bucket: grant it roles/storage.objectAdmin on the bucket and give the VM the cloud-platform (or storage-full) scope" >&2
  elif grep -q -i "fusermount\|mount point\|mountpoint" "$said"; then
    echo "tpujob: mount point $mount_point: already mounted, not empty or not writable?" >&2
  fi
  rm -f "$said"
  echo "tpujob: gcsfuse could not mount gs://$bucket at $mount_point (exit $rc)" >&2
  exit "$rc"
fi
cat "$said"
rm -f "$said"
echo "tpujob: mounted gs://$bucket at $mount_point"
