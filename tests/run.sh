#!/bin/sh
# Install what the whole test suite needs, then run it. Usage: sh tests/run.sh [pytest args]
# - promtool (Debian's prometheus package) for the /metrics lint, when running as root with apt;
# - openssl for the TLS tests' certificates, likewise;
# - PyTorch's CPU build for the validator's compute checks;
# - nodewarden with its [test] extra (pytest, pandas, pyarrow, matplotlib, hyperscan, rich).
set -eu
cd "$(dirname "$0")/.."
if ! command -v promtool >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null 2>&1 \
        || echo "warning: could not install prometheus/promtool; its checks will be skipped" >&2
fi
# Alertmanager receives the alerts of the dashboards/ rules in the alerting end-to-end test.
if ! command -v prometheus-alertmanager >/dev/null 2>&1 && ! command -v alertmanager >/dev/null 2>&1 \
        && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    command -v promtool >/dev/null 2>&1 && { apt-get update -qq >/dev/null 2>&1 || true; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus-alertmanager >/dev/null 2>&1 \
        || echo "warning: could not install prometheus-alertmanager; the alerting test will be skipped" >&2
fi
# openssl makes the TLS tests' certificates (the agent's --web.config.file).
if ! command -v openssl >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null 2>&1 \
        || echo "warning: could not install openssl; the TLS tests will be skipped" >&2
fi
# systemd-analyze (Debian's systemd package) verifies the units `nodewarden install` writes.
if ! command -v systemd-analyze >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null 2>&1 \
        || echo "warning: could not install systemd (systemd-analyze); the unit tests will be skipped" >&2
fi
# chromium (headless) renders report.html as a person sees it in the report browser test.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 \
        || echo "warning: could not install chromium; the report browser test will be skipped (fails under CI=true)" >&2
fi
# No virtual environment: install into this Python, as on a GPU node's image.
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# The validator's compute checks run on PyTorch's CPU build here (GPU nodes bring their own
# CUDA build); without torch those tests are skipped, never faked.
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q torch==2.13.0 \
    || echo "warning: torch not installed; the compute-check tests will be skipped" >&2
python3 -m pip install -q -e '.[test]'
# The end-to-end tests write test fault lines (facility "user", flagged injected) into this
# machine's real /dev/kmsg. Set NODEWARDEN_WRITE_KMSG=0 on a node whose kernel log others watch.
export NODEWARDEN_WRITE_KMSG="${NODEWARDEN_WRITE_KMSG:-1}"
exec python3 -m pytest "$@"
