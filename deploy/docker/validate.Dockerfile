# syntax=docker/dockerfile:1
# The validator's image: `nodewarden validate` with the [validate] extra (PyTorch with CUDA,
# NumPy, rich) on NVIDIA's CUDA runtime image, which brings the CUDA user-space libraries and
# tells the NVIDIA container runtime to add the driver's CUDA and NVML libraries
# (NVIDIA_DRIVER_CAPABILITIES=compute,utility).
#
# Build from the repository root:
#   docker build -f deploy/docker/validate.Dockerfile -t nodewarden-validate:0.1.0 .
# Used by deploy/kubernetes/50-validate-cronjob.yaml and examples/validate-job.yaml.
#
# PyTorch: TORCH_VERSION is the release the test suite runs (tests/run.sh). The default
# package index's Linux x86_64 wheels of torch are CUDA builds that carry their own CUDA
# libraries; the node's driver must be new enough for that CUDA version. For a build for another CUDA version, pass
# --build-arg TORCH_INDEX_URL=<PyTorch's wheel index for it>, and a CUDA_IMAGE to match.
# Root, as under the systemd unit: the CronJob drops every capability.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04

FROM ${CUDA_IMAGE}
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/nodewarden/bin:${PATH}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/nodewarden
RUN pip install --no-cache-dir ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==${TORCH_VERSION}"
COPY pyproject.toml README.md /src/
COPY nodewarden /src/nodewarden
RUN pip install --no-cache-dir "/src[validate]" && rm -rf /src
ENTRYPOINT ["nodewarden", "validate"]
