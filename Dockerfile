# One image with the three programs: /coordinator, /agent, /edgedrainctl.
# Debian slim rather than distroless: the agent's default reboot command needs nsenter (util-linux).
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
