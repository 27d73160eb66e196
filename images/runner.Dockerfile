# syntax=docker/dockerfile:1
# The training runner image: ghcr.io/ringtrain/ringtrain-runner:VERSION (TrainingJob spec.image).
#   docker build -f images/runner.Dockerfile -t ghcr.io/ringtrain/ringtrain-runner:0.1.0 .
#   docker build -f images/runner.Dockerfile --build-arg FLAVOUR=cpu --build-arg BINARIES=build-cpu \
#     -t ringtrain-runner-cpu .
# FLAVOUR=cuda (release): build on NVIDIA's CUDA + cuDNN devel image (Ubuntu 24.04; NVIDIA
# publishes no Debian CUDA image) plus NCCL with the same scripts/build.sh that README and CI use,
# GPU runner on (nvcc, sm_80 and sm_90, cuBLAS, cuDNN, NCCL); run on the CUDA + cuDNN runtime
# image with NCCL. The same image runs CPU jobs.
# FLAVOUR=cpu (what CI builds and runs with podman): Debian 12 slim and a CPU-only runner.
# BINARIES picks where the binaries come from: build-cuda (default), build-cpu, or prebuilt
# (binaries already built on a Debian 12 host, from a context made by scripts/images.sh:
# prebuilt/out/ and prebuilt/usr/share/datasets/), so CI compiles once.
# Runtime stage: the packages that own the shared libraries the binaries load
# (images/runtime-packages.sh), the Fashion-MNIST files that the TrainingJob default dataset path
# points at, /ckpt (the default checkpoint path) writable by the user, run as 65532.
ARG CUDA_VERSION=13.0.2
ARG UBUNTU_VERSION=24.04
ARG DEBIAN_VERSION=12
ARG FLAVOUR=cuda
ARG BINARIES=build-cuda

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu${UBUNTU_VERSION} AS build-cuda
ENV DEBIAN_FRONTEND=noninteractive
# NCCL's headers at the version of the libnccl2 the image holds (NVIDIA pins it), if any.
RUN apt-get update \
 && nccl=$(dpkg-query -W -f='${Version}' libnccl2 2>/dev/null || true) \
 && if [ -n "$nccl" ]; then pkgs="libnccl2=$nccl libnccl-dev=$nccl"; else pkgs="libnccl2 libnccl-dev"; fi \
 && apt-get install -y --no-install-recommends --allow-change-held-packages $pkgs \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Ubuntu's newer GCC may warn where Debian 12's does not: warnings stay warnings here (CI
# builds with -Werror on Debian 12).
ARG CMAKE_ARGS="-DRINGTRAIN_CUDA=ON -DRINGTRAIN_BUILD_TESTS=OFF -DRINGTRAIN_BUILD_BENCH=OFF -DRINGTRAIN_WERROR=OFF"
RUN BUILD_DIR=/build bash scripts/build.sh ${CMAKE_ARGS} \
 && mkdir -p /out \
 && install -m 0755 /build/bin/ringtrain-runner /build/bin/ringtrain /out/ \
 && bash images/runtime-packages.sh /out/ringtrain-runner /out/ringtrain > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

FROM debian:${DEBIAN_VERSION} AS build-cpu
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY . .
RUN BUILD_DIR=/build bash scripts/build.sh -DRINGTRAIN_CUDA=OFF -DRINGTRAIN_BUILD_TESTS=OFF \
      -DRINGTRAIN_BUILD_BENCH=OFF \
 && mkdir -p /out \
 && install -m 0755 /build/bin/ringtrain-runner /build/bin/ringtrain /out/ \
 && bash images/runtime-packages.sh /out/ringtrain-runner /out/ringtrain > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

FROM scratch AS prebuilt
COPY prebuilt/out/ /out/
COPY prebuilt/usr/share/datasets/ /usr/share/datasets/

FROM ${BINARIES} AS binaries

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-ubuntu${UBUNTU_VERSION} AS runtime-cuda
ENV NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# libnccl2: the NCCL communicator (the runtime base usually ships it; this makes it certain).
RUN echo libnccl2 > /tmp/extra-packages.txt

FROM debian:${DEBIAN_VERSION}-slim AS runtime-cpu
RUN : > /tmp/extra-packages.txt

FROM runtime-${FLAVOUR}
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=binaries /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get -o Acquire::Retries=3 update \
 && cat /tmp/runtime-packages.txt /tmp/extra-packages.txt \
    | xargs apt-get install -y --no-install-recommends \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/* /tmp/*-packages.txt \
      /usr/share/doc /usr/share/man /usr/share/info \
 && mkdir -p /ckpt \
 && chown 65532:65532 /ckpt
COPY --from=binaries /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
COPY --from=binaries /out/ringtrain-runner /out/ringtrain /usr/local/bin/
LABEL org.opencontainers.image.title="ringtrain-runner" \
      org.opencontainers.image.description="ringtrain training runner (CUDA + NCCL or CPU; TCP ring on CPUs)"
ENV HOME=/tmp \
    RINGTRAIN_METRICS_PORT=9400
# 9400: /metrics, /status, /healthz. /ckpt: checkpoints (the operator mounts a volume there).
EXPOSE 9400
WORKDIR /tmp
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ringtrain-runner"]
