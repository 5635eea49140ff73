# shellcheck shell=bash
# Common helpers of the rdmad VM test bed; sourced by build-image, run and e2e.

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$VM_DIR/../.." && pwd)
VM_SUITE=bookworm

log() { printf '%s: %s\n' "${0##*/}" "$*" >&2; }
die() { printf '%s: error: %s\n' "${0##*/}" "$*" >&2; exit "${DIE_RC:-125}"; }

# ensure_host_tools installs the host packages the test bed needs when a
# command is missing. It installs only as root; otherwise it names them.
ensure_host_tools() {
	local missing=() cmd pkg
	for pair in qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils \
		debootstrap:debootstrap mke2fs:e2fsprogs flock:util-linux ss:iproute2; do
		cmd=${pair%%:*} pkg=${pair#*:}
		command -v "$cmd" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		die "missing host packages: ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root"
	fi
	log "installing host packages: ${missing[*]}"
	host_apt_install "${missing[@]}" ||
		{ apt-get update >&2 && host_apt_install "${missing[@]}"; } ||
		die "apt-get install ${missing[*]} failed"
}

# host_apt_install PACKAGE...: installs the packages, but only when that
# upgrades no package already on the host (apt-get upgrades a dependency a
# new package wants newer without asking; installing lintian upgraded
# perl-base): a simulated run names the upgrades first and, with any, it
# stops instead when RDMAD_NO_UPGRADES=1. packaging/build has the same check.
host_apt_install() {
	local upgrades
	upgrades=$(apt-get -s -q --no-upgrade --no-install-recommends install "$@"|
		sed -n 's/^Inst \([^ ]*\) \[\([^]]*\)\] (\([^ ]*\).*/\1 \2 -> \3/p' | paste -sd, - | sed 's/,/, /g')
	if [ -n "$upgrades" ]; then
		[ "${RDMAD_NO_UPGRADES:-}" = 1 ] &&
			die "installing $* would upgrade installed packages ($upgrades), and RDMAD_NO_UPGRADES=1 forbids it; install them yourself (apt-get install $*) if that is fine"
		echo "installing $* also upgrades installed packages their dependencies need newer: $upgrades (RDMAD_NO_UPGRADES=1 stops instead)" >&2
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-upgrade --no-install-recommends "$@" >&2
}

# vm_cache_root prints the directory that holds built images.
vm_cache_root() { printf '%s\n' "${RDMAD_VM_CACHE:-/var/cache/rdmad-vm}"; }

# recipe_hash prints a short hash of everything that goes into the image:
# the suite, the package list, the builder and the files baked into the
# image (not the runner or guest/: those reach the VM over 9p per run).
recipe_hash() {
	(
		cd "$VM_DIR" &&
			{ echo "suite $VM_SUITE"; cat packages build-image; find image -type f | LC_ALL=C sort | while read -r f; do echo "== $f"; cat "$f"; done; }
	) | sha256sum | cut -c1-16
}

# host_mirror prints the Debian mirror for $VM_SUITE: RDMAD_VM_MIRROR if set,
# else the first one the host's apt configuration uses for that suite.
host_mirror() {
	if [ -n "${RDMAD_VM_MIRROR:-}" ]; then
		printf '%s\n' "$RDMAD_VM_MIRROR"
		return 0
	fi
	local m f
	# deb822 .sources: a stanza whose Suites has the suite and Types has deb.
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		m=$(awk -v suite="$VM_SUITE" '
			function flush() { if (deb && has && uri != "") { print uri; found = 1; exit } deb = has = 0; uri = "" }
			/^[ \t]*$/ { flush(); next }
			/^[ \t]*#/ { next }
			tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
			tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) has = 1 }
			tolower($1) == "uris:" { uri = $2 }
			END { if (!found) flush() }' "$f")
		[ -n "$m" ] && { printf '%s\n' "$m"; return 0; }
	done
	# One-line format: deb [options] URI SUITE COMPONENTS...
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		m=$(awk -v suite="$VM_SUITE" '
			$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
			              if ($(i+1) == suite) { print $i; exit } }' "$f")
		[ -n "$m" ] && { printf '%s\n' "$m"; return 0; }
	done
	return 1
}
