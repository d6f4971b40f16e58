# syntax=docker/dockerfile:1
# One image for every target: the command picks it (fetcher, dispatcher, worker, aggregator,
# gateway, or `run --targets ...`). Build: docker build -t bulkaction:local .
# The Go version matches go.mod (checked by `make test-deployments`).
ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOOS=linux GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags="-s -w" -o /out/bulkaction ./cmd/bulkaction
# The healthcheck command (the final image has no shell, curl or wget).
RUN --mount=type=cache,target=/root/.cache/go-build \
    cd deployments/healthprobe && go build -trimpath -ldflags="-s -w" -o /out/healthprobe .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/bulkaction /usr/local/bin/bulkaction
COPY --from=build /out/healthprobe /usr/local/bin/healthprobe
USER 65532:65532
ENV BULKACTION_HTTP_ADDR=:8080 BULKACTION_LOG_FORMAT=json
# 8080: /metrics, /healthz and /readyz of every target; 8090: the gateway's API and dashboard
# (BULKACTION_GATEWAY_ADDR).
EXPOSE 8080 8090
# Kubernetes uses its own probes (/healthz, /readyz); this serves Docker and compose.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 CMD ["/usr/local/bin/healthprobe"]
ENTRYPOINT ["/usr/local/bin/bulkaction"]
CMD ["worker"]
