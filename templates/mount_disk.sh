# mount_disk.sh (rendered by tpujob): mount an attached persistent disk; idempotent.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
disk={{disk}}
mount_point={{mount_point}}
read_only={{read_only}}
device=/dev/disk/by-id/google-$disk
sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo -n"
# A step that fails under set -e (mount, mkfs) has said why on stderr; this says which it was.
trap 'rc=$?; echo "tpujob: mounting disk $disk at $mount_point failed at: $BASH_COMMAND (exit $rc)" >&2' ERR

if mountpoint -q "$mount_point"; then echo "tpujob: $mount_point already mounted"; exit 0; fi
# An attachment made just now may take a moment to show up.
for _ in $(seq 30); do [ -e "$device" ] && break; sleep 1; done
[ -e "$device" ] || { echo "tpujob: $device not found: is disk $disk attached?" >&2; exit 1; }
$sudo_ mkdir -p "$mount_point"
if [ -d "$device" ]; then
  # The local emulator attaches a disk as a directory: a bind mount stands in for the device.
  $sudo_ mount --bind "$device" "$mount_point"
  if [ "$read_only" = 1 ]; then $sudo_ mount -o remount,bind,ro "$mount_point"; fi
elif [ "$read_only" = 1 ]; then
  # noload: no journal replay, which a disk attached read-only to many hosts must not attempt.
  $sudo_ mount -o ro,noload "$device" "$mount_point"
else
  if ! $sudo_ blkid "$device" > /dev/null 2>&1; then  # a fresh disk: format it, once
    $sudo_ mkfs.ext4 -m 0 -E lazy_itable_init=0,lazy_journal_init=0,discard "$device"
  fi
  $sudo_ mount -o discard,defaults "$device" "$mount_point"
  $sudo_ chmod a+w "$mount_point"
fi
echo "tpujob: mounted disk $disk at $mount_point ($([ "$read_only" = 1 ] && echo ro || echo rw))"
