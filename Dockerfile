# The Debian-based variant of edgedrain's image, with a shell and nsenter (util-linux), for
# deploy/components/nsenter-reboot only: the agent's shell commands run in the host's namespaces.
# The regular image (make image: no base image, no shell, no runtime needed to build it) suits
# the default, where the agent reboots through systemd-logind over D-Bus.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/ ./cmd/coordinator ./cmd/agent ./cmd/edgedrainctl

FROM debian:bookworm-slim
COPY --from=build /out/coordinator /out/agent /out/edgedrainctl /
USER 65532:65532
ENTRYPOINT ["/coordinator"]
