# syncd and syncctl in a small image that runs as a non-root user (docs/OPERATIONS.md, "Running
# in containers"):
#
#   docker build -t syncd .                       # or: --build-arg VERSION=v0.7.0
#   docker run -p 7300:7300/udp -v syncd-data:/data syncd
#
# A lone node on its embedded defaults, listening on every address of the container; settings
# come from SYNCD_* variables (docs/syncd.example.toml lists the keys), e.g. -e SYNCD_SHARDS=16.
# cmd/syncd/deploy/compose.yaml runs three nodes.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
# Static binaries (Pebble, Raft and QUIC are pure Go), stripped, with the version syncd -version
# and the syncd_build_info metric report.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/syncd-dev/syncd/syncd/buildinfo.version=${VERSION}" \
      -o /out/ ./cmd/syncd ./cmd/syncctl \
 && mkdir -p /out/data /out/cluster/ca /out/cluster/shared /out/cluster/n1 /out/cluster/n2 /out/cluster/n3

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/syncd /out/syncctl /usr/local/bin/
# Owned by the image's user, so that named volumes mounted there start writable by it (the
# compose file mounts the cluster's shared files under /cluster/ca, shared, n1, n2 and n3).
COPY --from=build --chown=nonroot:nonroot /out/data /data
COPY --from=build --chown=nonroot:nonroot /out/cluster /cluster
USER nonroot:nonroot
ENV SYNCD_DATA_DIR=/data \
    SYNCD_LISTEN=0.0.0.0:7300 \
    SYNCD_RAFT_ADDR=0.0.0.0:7400
# Clients (QUIC), the Raft port (mutual TLS between nodes). The admin HTTP port (7380) stays on
# the container's loopback unless SYNCD_ADMIN and SYNCD_ADMIN_TOKEN_FILE say otherwise.
EXPOSE 7300/udp 7400/tcp
VOLUME ["/data"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/syncd"]
