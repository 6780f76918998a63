# unpack.sh (rendered by tpujob): replace a directory with an uploaded archive, record its hash.
# Each placeholder in double braces below becomes one shell-quoted word; nothing else is
# substituted.
set -euo pipefail
dest={{dest}}
archive={{archive}}
digest={{digest}}
case $dest in /*) ;; *) dest=$HOME/$dest ;; esac
case $archive in /*) ;; *) archive=$HOME/$archive ;; esac

rm -rf "$dest.tpujob-new"
mkdir -p "$dest.tpujob-new"
tar -xzf "$archive" -C "$dest.tpujob-new"
rm -f "$archive"
printf '%s\n' "$digest" > "$dest.tpujob-new/.tpujob-sync-hash"
rm -rf "$dest"
mv "$dest.tpujob-new" "$dest"
echo updated
