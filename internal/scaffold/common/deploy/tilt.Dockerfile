# The image the Tiltfile builds: the worker binary compiled on the host (build/tilt/worker,
# the whole build context) on the same base as ../Dockerfile.
FROM gcr.io/distroless/static-debian12:nonroot
COPY worker /app
USER 65532:65532
ENTRYPOINT ["/app"]
