# unmount.sh (rendered by tpujob): unmount the job's disks and buckets; idempotent.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -uo pipefail
mount_points={{mount_points}}
sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo -n"
while IFS= read -r path; do
  [ -n "$path" ] || continue
  if mountpoint -q "$path"; then
    # fusermount for gcsfuse mounted by a user; umount for disks (and a root's gcsfuse).
    fusermount -u "$path" 2> /dev/null || $sudo_ umount "$path" || $sudo_ umount -l "$path"
  fi
done <<< "$mount_points"
