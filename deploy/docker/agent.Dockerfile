# syntax=docker/dockerfile:1
# The nodewarden agent's image: Python 3.11, nodewarden and its core dependencies only
# (pyproject.toml's [project] dependencies; no extra). No NVIDIA library is in it: the NVIDIA
# container runtime adds the driver's libnvidia-ml.so.1 at start
# (NVIDIA_DRIVER_CAPABILITIES=utility), so one image serves every driver version.
#
# Build from the repository root (the build context must hold pyproject.toml):
#   docker build -f deploy/docker/agent.Dockerfile -t nodewarden-agent:0.1.0 .
# Used by deploy/kubernetes/20-agent-daemonset.yaml; its args are the agent's flags.
#
# User: nodewarden (uid 10001), not root, by default, e.g. for `docker run` on a node with
# kernel.dmesg_restrict=0 or with the kernel-log collector off. Where dmesg_restrict=1 (Debian's
# and Ubuntu's default), reading /dev/kmsg needs CAP_SYSLOG, which only a root process gets in a
# container (no ambient capabilities): the DaemonSet runs it as uid 0 (its comments say why).
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY nodewarden ./nodewarden
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/nodewarden --no-create-home \
        --shell /usr/sbin/nologin nodewarden \
    && install -d -o nodewarden -g nodewarden -m 0750 /var/lib/nodewarden
USER 10001:10001
EXPOSE 9764
ENTRYPOINT ["nodewarden", "agent"]
