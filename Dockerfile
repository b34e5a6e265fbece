# ctxd sidecar image: slim Python, non-root, LMDB on a volume by default.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY sidecar ./sidecar
COPY plugins ./plugins
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[all]"

FROM python:3.11-slim
RUN useradd --system --uid 10001 --home-dir /var/lib/ctxd --create-home ctxd
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels "ctxd-sidecar[all]" && rm -rf /wheels
USER 10001
VOLUME ["/var/lib/ctxd"]
ENV CTXD_LISTEN=0.0.0.0:50051 \
    CTXD_STORE=lmdb:///var/lib/ctxd \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
EXPOSE 50051
# Docker / Compose health: gRPC health of the process, dialled at CTXD_LISTEN
# (0.0.0.0 becomes 127.0.0.1); health needs no token. With TLS on, also set
# CTXD_TLS_CA_FILE. Kubernetes ignores this and uses the manifests' probes.
HEALTHCHECK --interval=30s --timeout=10s --start-period=15s --retries=3 \
    CMD ["ctxd", "health", "--timeout", "5"]
# SIGTERM drains in-flight calls for grace_seconds (10 s by default) before exit.
STOPSIGNAL SIGTERM
ENTRYPOINT ["ctxd", "serve"]
