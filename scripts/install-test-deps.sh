#!/usr/bin/env bash
# Installs what the tests need, pinned and idempotent; each step is skipped when already satisfied.
#
#   - Chromium from Debian's packages (/usr/bin/chromium), for the browser tests;
#   - the Playwright driver: playwright-core, pinned in e2e/driver/package-lock.json to the version
#     playwright-go (go.mod) expects, installed with `npm ci`, and the e2e/driver/package link
#     playwright-go looks for (<driver dir>/package/cli.js);
#   - stripe-mock, Stripe's API mock, built from the Go module proxy into tools/bin;
#   - PostgreSQL's server binaries from Debian's postgresql package (initdb, pg_ctl), for the tests
#     that run on PostgreSQL (store/pgtest starts a throwaway cluster from them); skipped when
#     GPUMARKET_TEST_POSTGRES_URL names a server to use instead;
#   - podman with runc (crun refuses some hosts' cgroup layouts), busybox-static and openssh-server from
#     Debian's packages, for the container-mode test (cmd/gpumarket-agent: real podman, an sshd image built
#     by `podman import` of busybox and the host's sshd; no registry is needed). Debian 12 ships podman 4.3,
#     which understands CDI devices; the test refuses an older one.
#
# Only the Go module proxy, Debian's packages and the npm registry are used: no browser or driver
# downloads of Playwright's own.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

# Keep these two pinned together: playwright-go v0.5200.1 runs Playwright 1.52.0 and refuses any other.
playwright_core_version=1.52.0
stripe_mock_version=v0.203.0

log() { printf 'install-test-deps: %s\n' "$*"; }

as_root() {
	if [[ $(id -u) -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		log "need root (or sudo) to run: $*" >&2
		exit 1
	fi
}

install_chromium() {
	if [[ -x /usr/bin/chromium ]]; then
		log "chromium present: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
		return
	fi
	log "installing chromium from Debian's packages"
	as_root apt-get update
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium fonts-dejavu-core
}

install_playwright_driver() {
	local dir=$root/e2e/driver
	local cli=$dir/node_modules/playwright-core/cli.js
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		log "installing nodejs and npm from Debian's packages"
		as_root apt-get update
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm
	fi

	local installed=
	if [[ -f $dir/node_modules/playwright-core/package.json ]]; then
		installed=$(node -p 'require(process.argv[1]).version' "$dir/node_modules/playwright-core/package.json")
	fi
	if [[ $installed == "$playwright_core_version" && -f $cli ]]; then
		log "playwright-core $installed present"
	else
		log "installing playwright-core $playwright_core_version with npm ci"
		(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund)
	fi

	# playwright-go runs <driver dir>/package/cli.js: point "package" at the npm package.
	if [[ $(readlink "$dir/package" 2>/dev/null || true) != node_modules/playwright-core ]]; then
		rm -rf "$dir/package"
		ln -s node_modules/playwright-core "$dir/package"
	fi

	local version
	version=$(node "$dir/package/cli.js" --version)
	if [[ $version != *"$playwright_core_version"* ]]; then
		log "driver reports '$version', want $playwright_core_version" >&2
		exit 1
	fi
	log "driver ready: $dir ($version)"
}

install_stripe_mock() {
	local bin=$root/tools/bin/stripe-mock
	# The binary records the module version it was built from.
	if [[ -x $bin ]] && go version -m "$bin" 2>/dev/null | grep -q "github.com/stripe/stripe-mock[[:space:]]*$stripe_mock_version"; then
		log "stripe-mock $stripe_mock_version present: $bin"
		return
	fi
	log "building stripe-mock $stripe_mock_version"
	GOBIN=$root/tools/bin go install "github.com/stripe/stripe-mock@$stripe_mock_version"
}

install_postgresql() {
	if [[ -n ${GPUMARKET_TEST_POSTGRES_URL:-} ]]; then
		log "PostgreSQL: using GPUMARKET_TEST_POSTGRES_URL"
		return
	fi
	if compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
		log "PostgreSQL server present: $(ls -d /usr/lib/postgresql/*/bin | tail -1)"
		return
	fi
	log "installing PostgreSQL from Debian's packages"
	as_root apt-get update
	# The package's own cluster is not needed: the tests start their own.
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql
}

install_containers() {
	local want=(podman runc uidmap slirp4netns fuse-overlayfs busybox-static openssh-server)
	local missing=()
	for p in "${want[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		log "podman present: $(podman --version)"
	else
		log "installing ${missing[*]} from Debian's packages"
		as_root apt-get update
		# The openssh-server package would start an sshd on port 22: the test only copies its binary.
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
	fi
	local major
	major=$(podman --version | sed -E 's/.* ([0-9]+)\..*/\1/')
	if ((major < 4)); then
		log "podman $(podman --version) is too old for CDI devices; want 4 or later" >&2
		exit 1
	fi
}

install_chromium
install_playwright_driver
install_stripe_mock
install_postgresql
install_containers
log "done"
