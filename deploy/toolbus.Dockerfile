# The toolbus image: one static binary, nothing else. deploy/build-images.sh
# builds the binary on the host and sends only it and this file as the
# build context.
FROM scratch
COPY toolbus /toolbus
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/toolbus"]
CMD ["--help"]
