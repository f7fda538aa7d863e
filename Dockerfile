# agentload: the package, its built-in profiles and the plain-Locust locustfile, run as a
# non-root user. `docker run agentload run --host http://vllm:8000 --metrics-port 0.0.0.0:9464`
# (docs/live-metrics.md: the image, and Kubernetes with deploy/kubernetes/).

# Build the wheel in its own stage so the image carries no build tools.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY workload ./workload
COPY profiles ./profiles
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY --from=build /wheels /wheels
# with the otel extra: --otlp-endpoint (OpenTelemetry export) works in the image
RUN pip install --no-cache-dir "$(echo /wheels/*.whl)[otel]" && rm -rf /wheels \
    && useradd --uid 10001 --create-home --shell /usr/sbin/nologin agentload \
    && mkdir -p /runs && chown agentload /runs
# `locust -f /app/locustfiles/agents.py --master|--worker ...` for multi-pod runs
COPY locustfiles/agents.py /app/locustfiles/agents.py
USER 10001
WORKDIR /runs
# 9464: --metrics-port (Prometheus); 5557: a Locust master's worker port; 8089: --web
EXPOSE 9464 5557 8089
ENTRYPOINT ["agentload"]
CMD ["--help"]
