# rollout's image: one static binary (no cgo, no libc) on distroless/static, run as a non-root
# user, with the built-in task files under /opt/rollout/data. No shell: Kubernetes runs it
# with args (deploy/kubernetes/), and rollout merge expands its globs itself.
#   docker build -t rollout .
# `make static` builds the same binary without Docker.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/rollout ./cmd/rollout

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/rollout /usr/local/bin/rollout
COPY data/ /opt/rollout/data/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/rollout"]
