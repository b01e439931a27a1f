# The controller's image: a static (musl) release binary on an empty base,
# run as a numeric non-root user (the chart's runAsUser, so runAsNonRoot
# holds without an /etc/passwd). hack/image-check proves what it can of
# this recipe without a container engine (docs/src/installing/image.md).
FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin tfjob-federator

FROM scratch
COPY --from=build /src/target/x86_64-unknown-linux-musl/release/tfjob-federator /usr/local/bin/tfjob-federator
# An empty base has no default PATH for the entrypoint's lookup.
ENV PATH=/usr/local/bin
USER 65532:65532
ENTRYPOINT ["tfjob-federator"]
