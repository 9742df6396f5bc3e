#!/usr/bin/env bash
# Runs inside `unshare --mount --net`: overlays ROOTFS (read-only lower) with WORK/upper, then,
# as the session user in a chroot, starts the image's Xvfb and connects an xterm to it.
# Prints "xterm connected" on success. The namespace takes the mounts with it when it exits.
set -euo pipefail
rootfs=$1
work=$2
mkdir -p "$work/upper" "$work/work" "$work/merged"
mount -t overlay overlay -o "lowerdir=$rootfs,upperdir=$work/upper,workdir=$work/work" "$work/merged"
mount -t proc proc "$work/merged/proc"
mount --rbind /dev "$work/merged/dev"
chroot "$work/merged" /usr/sbin/runuser -u user -- /bin/sh -ec '
  cd "$HOME"
  Xvfb -displayfd 5 -screen 0 800x600x24 -nolisten tcp 5>/tmp/display 2>/tmp/xvfb.log &
  xvfb=$!
  i=0
  while [ ! -s /tmp/display ]; do
    i=$((i + 1))
    if [ $i -ge 600 ] || ! kill -0 $xvfb 2>/dev/null; then cat /tmp/xvfb.log; exit 1; fi
    sleep 0.1
  done
  export DISPLAY=":$(cat /tmp/display)"
  echo "display $DISPLAY"
  if xterm -e true; then echo "xterm connected"; fi
  kill $xvfb
  wait $xvfb || true
'
