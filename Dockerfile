# sluice in a container: docs/operations.md#docker has the commands.
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 --stop-timeout 35 sluice
# Two stages on Debian 12: the first builds the .deb exactly as scripts/package-test does,
# the second installs it (apt resolves its Depends) and runs as the package's `sluice` user.
# Not built in CI (no Docker daemon there); it.test_dockerfile checks it against the code
# (every library package scripts/install-deps lists must be installed here; libc-ares-dev
# is here ahead of the resolver that needs it).

FROM debian:12 AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config file dpkg-dev \
      libuv1-dev node-llhttp libssl-dev libyaml-dev libhiredis-dev libcrypt-dev \
      libnghttp2-dev libluajit2-5.1-dev libc-ares-dev zlib1g-dev libbrotli-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B build-pkg -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON \
 && cmake --build build-pkg -j"$(nproc)" --target sluice_bin sluice sluice_test \
 && cd build-pkg && cpack -G DEB && mv sluice_*.deb /sluice.deb

FROM debian:12-slim AS runtime
ARG DEBIAN_FRONTEND=noninteractive
COPY --from=build /sluice.deb /tmp/sluice.deb
# curl is for the HEALTHCHECK; the package's postinst creates the sluice system user.
RUN apt-get update \
 && apt-get install -y --no-install-recommends /tmp/sluice.deb curl \
 && rm -rf /var/lib/apt/lists/* /tmp/sluice.deb
COPY packaging/docker.yaml /etc/sluice/sluice.yaml
USER sluice
EXPOSE 8080
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD curl -fsS -o /dev/null http://127.0.0.1:9090/ready || exit 1
ENTRYPOINT ["/usr/bin/sluice"]
CMD ["run", "-c", "/etc/sluice/sluice.yaml"]
