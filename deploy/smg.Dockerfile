# The Shepherd Model Gateway (PyPI `smg`), as a non-root image for deploy/kubernetes/smg.yaml.
#
#   docker build -f deploy/smg.Dockerfile -t tessera-smg deploy
#
# Debian's own Python (3.11, which smg's wheels support) in a virtual environment: the same
# base image as Tessera's.
FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/smg \
    && /opt/smg/bin/pip install --no-cache-dir smg==1.13.0 \
    && useradd --system --uid 10001 smg
ENV PATH=/opt/smg/bin:$PATH
USER 10001
EXPOSE 30000
ENTRYPOINT ["smg", "launch"]
