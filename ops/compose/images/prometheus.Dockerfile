# Prometheus (and promtool) from Debian's package, for hosts that cannot pull prom/prometheus:
# ops/compose/local-images.sh builds it on its own Debian root (build arg BASE_IMAGE). Laid out
# like the official image: the config at /etc/prometheus/prometheus.yml, data in /prometheus.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
# Debian's package pulls in the node exporter by recommendation; only the server is wanted.
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o prometheus -g prometheus /prometheus
WORKDIR /prometheus
USER prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
