# The Shepherd Model Gateway (PyPI `smg`), as a non-root image for deploy/kubernetes/smg.yaml.
#
#   docker build -f deploy/smg.Dockerfile -t tessera-smg deploy
FROM python:3.12-slim-bookworm
RUN pip install --no-cache-dir smg==1.13.0 \
    && useradd --system --uid 10001 smg
USER 10001
EXPOSE 30000
ENTRYPOINT ["smg", "launch"]
