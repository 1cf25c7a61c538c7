# syntax=docker/dockerfile:1
# Build stage: install the service into a self-contained virtualenv.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY generated ./generated
COPY storage ./storage
COPY pai_grpc ./pai_grpc
RUN python -m venv /opt/pai && /opt/pai/bin/pip install .

# Runtime stage: no compilers, no sources, an unprivileged user.
FROM python:3.11-slim
RUN groupadd --system --gid 10001 pai \
    && useradd --system --uid 10001 --gid pai --home-dir /data --create-home pai
COPY --from=build /opt/pai /opt/pai
ENV PATH=/opt/pai/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PAI_ADDRESS=0.0.0.0:50051 \
    PAI_DATABASE_URL=sqlite:////data/pai.db
USER pai
WORKDIR /data
VOLUME ["/data"]
EXPOSE 50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["pai-grpc", "health", "--address", "127.0.0.1:50051"]
# The image listens on 0.0.0.0, so `serve` refuses to start (exit 2, saying why)
# unless authentication is configured: mount a config file holding [auth] and set
# PAI_CONFIG to it. For a local try-out only, PAI_INSECURE_DEV=1 serves with no
# authentication at all (with a WARNING in the log). Neither is set here on purpose.
# Migrations are idempotent; with PostgreSQL, run `pai-grpc migrate` as a release
# step instead and override the command with `pai-grpc serve`.
CMD ["sh", "-c", "pai-grpc migrate && exec pai-grpc serve"]
