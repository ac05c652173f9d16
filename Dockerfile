# The platform's image: `x402mw platform serve` by default; the same image runs `worker` and `migrate`
# (compose.yaml, deploy/kubernetes/). Configured only by X402MW_* environment variables
# (docs/platform.md); tests/integration/test_container_recipe.py runs this file's CMD with its ENV.

FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/x402mw
COPY pyproject.toml README.md constraints.txt ./
COPY x402mw ./x402mw
RUN /opt/x402mw/bin/pip install --no-cache-dir --constraint constraints.txt ".[platform,otel]"

FROM python:3.11.11-slim-bookworm
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/x402mw --create-home x402mw
COPY --from=build /opt/x402mw /opt/x402mw
ENV PATH=/opt/x402mw/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    X402MW_HOST=0.0.0.0 \
    X402MW_PORT=4402 \
    X402MW_DATA_DIR=/var/lib/x402mw \
    X402MW_LOG_FORMAT=json \
    X402MW_DRAIN_SECONDS=25
USER 10001:10001
WORKDIR /var/lib/x402mw
EXPOSE 4402
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ['X402MW_PORT'] + '/healthz', timeout=2)"]
CMD ["x402mw", "platform", "serve"]
