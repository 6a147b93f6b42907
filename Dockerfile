# kube-lb container image. Not built by this repository's CI (no container engine there);
# build it with: docker build -t kube-lb:dev .
#
# Stage 1: build a static binary (musl) with every provider compiled in and without the embedded
# API server (feature `apiserver`): the image runs only `controller` and `proxy`, and `up`,
# `reconcile` and `apiserver` in it say they were left out.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --no-default-features --features aws,gcp,azure,openstack,tencent,baidu \
    && cp target/x86_64-unknown-linux-musl/release/kube-lb /kube-lb

# Stage 2: the proxy shells out to `nft` and `conntrack`, so the runtime image is a slim Debian
# with just those two tools. The controller runs as the non-root user 65532.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends nftables conntrack ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 nonroot && useradd --uid 65532 --gid 65532 --no-create-home nonroot
COPY --from=build /kube-lb /usr/local/bin/kube-lb
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/kube-lb"]
