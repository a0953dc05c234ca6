# syntax=docker/dockerfile:1

# Build: the same steps as `make build`.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go tool templ generate -log-level warn
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/gpumarket ./cmd/gpumarket
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/gpumarket-agent ./cmd/gpumarket-agent
# The data directory, created here because the runtime image has no shell.
RUN mkdir -p /out/data

# Run: a static binary (assets embedded) on a distroless base, as a non-root user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gpumarket /usr/local/bin/gpumarket
# The provider agent, for providers to copy out (docker cp); it runs on their hosts, not here.
COPY --from=build /out/gpumarket-agent /usr/local/bin/gpumarket-agent
COPY --from=build --chown=65532:65532 /out/data /data
ENV GPUMARKET_ADDR=:8080 \
    GPUMARKET_DB=/data/gpumarket.db
VOLUME /data
EXPOSE 8080
USER 65532:65532
# `docker run IMAGE` serves; `docker run IMAGE admin create -db /data/gpumarket.db ...` runs a subcommand.
ENTRYPOINT ["/usr/local/bin/gpumarket"]
CMD ["serve"]
