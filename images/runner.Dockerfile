# syntax=docker/dockerfile:1
# The training runner image: ghcr.io/ringtrain/ringtrain-runner:VERSION (TrainingJob spec.image).
#   docker build -f images/runner.Dockerfile -t ghcr.io/ringtrain/ringtrain-runner:0.1.0 .
# Build stage: NVIDIA's CUDA + cuDNN devel image (Ubuntu 24.04; NVIDIA publishes no Debian CUDA
# image) plus NCCL, building with the same scripts/build.sh that README and CI use, with the
# GPU runner on (-DRINGTRAIN_CUDA=ON: nvcc, sm_80 and sm_90, cuBLAS, cuDNN, NCCL).
# Runtime stage: NVIDIA's CUDA + cuDNN runtime image (cuBLAS, cuDNN) with NCCL, the packages that own the shared
# libraries the binaries load (images/runtime-packages.sh), the Fashion-MNIST files that the
# TrainingJob default dataset path points at, run as 65532. The same image runs CPU jobs.
ARG CUDA_VERSION=13.0.2
ARG UBUNTU_VERSION=24.04

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-ubuntu${UBUNTU_VERSION} AS build
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

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-ubuntu${UBUNTU_VERSION}
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
# libnccl2: the NCCL communicator (the runtime base usually ships it; this makes it certain).
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends libnccl2 \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /usr/share/datasets/fashion-mnist /usr/share/datasets/fashion-mnist
COPY --from=build /out/ringtrain-runner /out/ringtrain /usr/local/bin/
LABEL org.opencontainers.image.title="ringtrain-runner" \
      org.opencontainers.image.description="ringtrain training runner (CUDA + NCCL, TCP ring on CPUs)"
ENV HOME=/tmp \
    RINGTRAIN_METRICS_PORT=9400 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
# 9400: /metrics, /status, /healthz.
EXPOSE 9400
WORKDIR /tmp
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ringtrain-runner"]
