# The kueuelog image: one image, every service (`kueuelog run watcher|scheduler|actuator`).
#   docker build -t ghcr.io/kueuelog/kueuelog:0.1.0 .
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the distribution needs (no tests, no dev extras), installed, then the sources dropped.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY events ./events
COPY services ./services
RUN pip install . && rm -rf /src

# A fixed non-root uid/gid, so that runAsNonRoot can be verified by the kubelet.
RUN groupadd --system --gid 10001 kueuelog \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/kueuelog --create-home --shell /usr/sbin/nologin kueuelog
WORKDIR /home/kueuelog
# The example manifests, for `docker run ... demo` and the docker-compose simulated cluster.
COPY --chown=10001:10001 examples ./examples
USER 10001:10001

EXPOSE 8080
ENTRYPOINT ["kueuelog"]
CMD ["--help"]
