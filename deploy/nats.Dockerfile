# The NATS server image: nats-server built from the module toolbus depends
# on, plus the toolbus binary for `toolbus health` (the image has no shell
# or curl for a health check). The JetStream store lives in /data.
FROM scratch
COPY nats-server /nats-server
COPY toolbus /toolbus
COPY --chown=65532:65532 data /data
USER 65532:65532
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["--jetstream", "--store_dir", "/data", "--http_port", "8222"]
