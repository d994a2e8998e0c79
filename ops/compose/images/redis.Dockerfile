# Redis from Debian's package, for hosts that cannot pull redis:*: ops/compose/local-images.sh
# builds it on its own Debian root (build arg BASE_IMAGE). Runs like the official image: user
# redis, data in /data, `redis-server` and `redis-cli` on PATH.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o redis -g redis /data
WORKDIR /data
USER redis
EXPOSE 6379
CMD ["redis-server"]
