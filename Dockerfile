# vk: one image for every component. The entry point is `vk`, so a pod runs
# `vk kubelet ...`, `vk controller-manager ...` or `vk webhook ...`.
#
#   buildah bud -t ghcr.io/you/vk:0.1.0 .      (or docker build)
#
# BASE may be any image with Python 3.11+ and its venv module. The playground
# builds from a local Debian base (`--build-arg BASE=localhost/vk-base`), because
# it has no registry to pull from.
ARG BASE=python:3.11-slim-bookworm

# Stage 1: wheels of vk and its dependencies, installed into a self-contained venv.
FROM ${BASE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY vk ./vk
# The chart ships in the wheel (share/vk/helm), so `vkctl install` works from the image too.
COPY deploy/helm ./deploy/helm
RUN python3 -m venv /opt/vk \
    && /opt/vk/bin/pip wheel --no-cache-dir --wheel-dir /wheels /src \
    && /opt/vk/bin/pip install --no-cache-dir --no-index --find-links /wheels vk \
    && /opt/vk/bin/python -m compileall -q -o 0 -o 2 /opt/vk/lib

# Stage 2: the venv alone, run as a non-root user. Nothing is written at run time
# but to /tmp (an emptyDir in vk's pods), so the root filesystem can be read-only.
FROM ${BASE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="vk" \
      org.opencontainers.image.description="Liqo-compatible offloading: virtual kubelets that stretch a Kubernetes cluster over provider clusters" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/vk /opt/vk
# The virtual kubelets run with PYTHONOPTIMIZE=2 (no docstrings: one process per VirtualNode):
# their bytecode is compiled here, the root filesystem being read-only at run time.
RUN python3 -c "import compileall, sysconfig; compileall.compile_dir(sysconfig.get_path('stdlib'), quiet=1, optimize=2)"
ENV PATH=/opt/vk/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# 65532: the uid the Deployments' securityContext names (runAsNonRoot is checked against it).
USER 65532:65532
ENTRYPOINT ["vk"]
CMD ["--help"]
