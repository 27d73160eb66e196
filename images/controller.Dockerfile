# syntax=docker/dockerfile:1
# The ringtrain controller (operator) image: ghcr.io/ringtrain/ringtrain:VERSION.
#   docker build -f images/controller.Dockerfile -t ghcr.io/ringtrain/ringtrain:0.1.0 .
# Build stage: Debian 12 with the same scripts/build.sh that README and CI use (it installs
# scripts/deps.sh's packages and builds with CMake + Ninja), so a green CI means this step works.
# `--build-arg BINARIES=prebuilt` takes binaries already built on a Debian 12 host instead, from
# a context that scripts/images.sh makes (prebuilt/out/: ringtrain, runtime-packages.txt), so CI
# compiles once.
# Runtime stage: Debian 12 slim with only the packages that own the shared libraries
# `ringtrain` loads (images/runtime-packages.sh resolves them with ldd + dpkg), run as 65532.
ARG DEBIAN_VERSION=12
ARG BINARIES=build

FROM debian:${DEBIAN_VERSION} AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY . .
ARG CMAKE_ARGS="-DRINGTRAIN_CUDA=OFF -DRINGTRAIN_BUILD_TESTS=OFF -DRINGTRAIN_BUILD_BENCH=OFF"
RUN BUILD_DIR=/build bash scripts/build.sh ${CMAKE_ARGS} \
 && mkdir -p /out \
 && install -m 0755 /build/bin/ringtrain /out/ringtrain \
 && bash images/runtime-packages.sh /out/ringtrain > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

FROM scratch AS prebuilt
COPY prebuilt/out/ /out/

FROM ${BINARIES} AS binaries

FROM debian:${DEBIAN_VERSION}-slim
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=binaries /out/runtime-packages.txt /tmp/runtime-packages.txt
# ca-certificates: TLS to the API server with a kubeconfig outside the cluster. No apt lists,
# docs or man pages are kept.
RUN apt-get -o Acquire::Retries=3 update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends ca-certificates \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/* /tmp/runtime-packages.txt \
      /usr/share/doc /usr/share/man /usr/share/info
COPY --from=binaries /out/ringtrain /usr/local/bin/ringtrain
LABEL org.opencontainers.image.title="ringtrain" \
      org.opencontainers.image.description="ringtrain TrainingJob operator"
# 8080: /metrics; 8081: /healthz and /readyz.
EXPOSE 8080 8081
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ringtrain"]
CMD ["controller", "--leader-elect"]
