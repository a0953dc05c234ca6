#!/usr/bin/env bash
# Builds the container tests' image, localhost/gpumarket-sshd-test:2, unless present: busybox and the
# host's sshd and ssh-keygen with the libraries ldd names, the users sshd needs and host keys made now,
# imported with `podman import` (no registry is needed). Needs busybox-static and openssh-server
# (scripts/install-test-deps.sh). Podman's global flags come from PODMAN_FLAGS (default: runc, vfs).
set -euo pipefail
image=localhost/gpumarket-sshd-test:2
read -r -a podman <<<"podman ${PODMAN_FLAGS:---runtime runc --storage-driver vfs}"
if "${podman[@]}" image exists "$image"; then
	exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"/{bin,usr/sbin,usr/bin,etc/ssh,root,run,tmp,var/empty,proc,dev,sys}
cp /bin/busybox "$root/bin/busybox"
for n in sh ls cat ps grep mkdir echo id sleep setsid hostname; do ln -s busybox "$root/bin/$n"; done
for bin in /usr/sbin/sshd /usr/bin/ssh-keygen; do
	cp "$bin" "$root$bin"
	for lib in $(ldd "$bin" | grep -o '/[^ :]*\.so[^ :]*' | sort -u); do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done
done
printf 'root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'root:*:19000:0:99999:7:::\n' >"$root/etc/shadow"
: >"$root/etc/ssh/sshd_config"
chmod 1777 "$root/tmp"
# Host keys now: an RSA key made at each start takes seconds on a busy machine.
ssh-keygen -A -f "$root" >/dev/null
tar -C "$root" -cf "$work/rootfs.tar" .
"${podman[@]}" import "$work/rootfs.tar" "$image" >/dev/null
