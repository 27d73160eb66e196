# syntax=docker/dockerfile:1
# The ringtrain controller (operator) image: ghcr.io/ringtrain/ringtrain:VERSION.
#   docker build -f images/controller.Dockerfile -t ghcr.io/ringtrain/ringtrain:0.1.0 .
# Build stage: Debian 12 with the same scripts/build.sh that README and CI use (it installs
# scripts/deps.sh's packages and builds with CMake + Ninja), so a green CI means this step works.
# Runtime stage: debian:12-slim with only the packages that own the shared libraries
# `ringtrain` loads (images/runtime-packages.sh resolves them with ldd + dpkg), run as 65532.
ARG DEBIAN_VERSION=12

FROM debian:${DEBIAN_VERSION} AS build
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /src
COPY . .
ARG CMAKE_ARGS="-DRINGTRAIN_BUILD_TESTS=OFF -DRINGTRAIN_BUILD_BENCH=OFF"
RUN BUILD_DIR=/build bash scripts/build.sh ${CMAKE_ARGS} \
 && mkdir -p /out \
 && install -m 0755 /build/bin/ringtrain /out/ringtrain \
 && bash images/runtime-packages.sh /out/ringtrain > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt

FROM debian:${DEBIAN_VERSION}-slim
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
# ca-certificates: TLS to the API server with a kubeconfig outside the cluster.
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /out/ringtrain /usr/local/bin/ringtrain
LABEL org.opencontainers.image.title="ringtrain" \
      org.opencontainers.image.description="ringtrain TrainingJob operator"
# 8080: /metrics; 8081: /healthz and /readyz.
EXPOSE 8080 8081
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/ringtrain"]
CMD ["controller", "--leader-elect"]
