#!/bin/sh
# Install what the whole test suite needs, then run it. Usage: sh tests/run.sh [--cov] [pytest args]
# - promtool and prometheus (Debian's prometheus package) for the /metrics lint and the scrape
#   tests, prometheus-alertmanager for the alerting test, when running as root with apt;
# - openssl for the TLS tests' certificates, systemd-analyze for the units, chromium for the
#   report browser test, gcc for the NVML simulator (tests/nvmlsim), likewise;
# - PyTorch's CPU build for the validator's compute checks;
# - nodewarden with its [test] extra (pytest, pandas, pyarrow, matplotlib, hyperscan, rich, coverage).
# Outside CI a piece that cannot be installed is a warning and its tests are skipped; under
# CI=true it stops here, non-zero, naming the piece (and tests/envneeds.py fails such a test).
# --cov: the suite under coverage, the Python processes it starts measured too
# ([tool.coverage.*] in pyproject.toml), then combined and reported.
set -eu
cd "$(dirname "$0")/.."

in_ci() {
    case "${CI:-}" in true | TRUE | True | 1) return 0 ;; *) return 1 ;; esac
}

# missing PIECE WHAT: PIECE could not be installed; WHAT names the tests that need it.
missing() {
    if in_ci; then
        echo "error: CI=true: $1 missing: could not install it; $2 cannot run" >&2
        exit 1
    fi
    echo "warning: could not install $1; $2 will be skipped (and fail under CI=true)" >&2
}

can_apt() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1
}

apt_updated=0
# apt_install PACKAGE...: quietly, one apt-get update per run.
apt_install() {
    can_apt || return 1
    if [ "$apt_updated" = 0 ]; then
        apt-get update -qq >/dev/null 2>&1 || true
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1
}

# need_command PACKAGE WHAT COMMAND...: one of COMMANDs on PATH, else apt-get install PACKAGE.
need_command() {
    package=$1 what=$2
    shift 2
    for c in "$@"; do command -v "$c" >/dev/null 2>&1 && return 0; done
    apt_install "$package" || true
    for c in "$@"; do command -v "$c" >/dev/null 2>&1 && return 0; done
    missing "$1 (Debian package $package)" "$what"
}

cov=0
if [ "${1:-}" = "--cov" ]; then
    cov=1
    shift
fi

need_command prometheus "the /metrics lint, the rule tests and the scrape tests" promtool
need_command prometheus "the scrape tests" prometheus
# Alertmanager receives the alerts of the dashboards/ rules in the alerting end-to-end test.
need_command prometheus-alertmanager "the alerting test" prometheus-alertmanager alertmanager
# openssl makes the TLS tests' certificates (the agent's --web.config.file).
need_command openssl "the TLS tests" openssl
# systemd-analyze (Debian's systemd package) verifies the units `nodewarden install` writes.
need_command systemd "the unit tests" systemd-analyze
# chromium (headless) renders report.html as a person sees it in the report browser test.
need_command chromium "the report browser test" chromium chromium-browser
# gcc builds the NVML simulator (tests/nvmlsim) every NVML test runs against.
need_command gcc "the NVML simulator tests" gcc cc

# No virtual environment: install into this Python, as on a GPU node's image.
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The validator's compute checks run on PyTorch's CPU build here (GPU nodes bring their own
# CUDA build); without torch those tests are skipped (failed under CI=true), never faked.
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q torch==2.13.0 \
    || missing torch "the compute-check tests"
python3 -m pip install -q -e '.[test]'
# The end-to-end tests write test fault lines (facility "user", flagged injected) into this
# machine's real /dev/kmsg. Set NODEWARDEN_WRITE_KMSG=0 on a node whose kernel log others watch.
export NODEWARDEN_WRITE_KMSG="${NODEWARDEN_WRITE_KMSG:-1}"
if [ "$cov" = 0 ]; then
    exec python3 -m pytest "$@"
fi
mkdir -p build/coverage
python3 -m coverage erase
rc=0
python3 -m coverage run -m pytest "$@" || rc=$?
python3 -m coverage combine -q
python3 -m coverage report
exit "$rc"
