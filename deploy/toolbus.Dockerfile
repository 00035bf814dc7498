# The toolbus image: one static binary, nothing else. deploy/build-images.sh
# builds the binary on the host and sends only it and this file as the
# build context.
FROM scratch
COPY toolbus /toolbus
USER 65532:65532
# The ingress (toolbus ingress, dev) serves on 8080; a worker serves only
# its metrics and probes, on 9464.
EXPOSE 8080 9464
ENTRYPOINT ["/toolbus"]
CMD ["--help"]
