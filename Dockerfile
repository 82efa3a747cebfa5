# One image for every cdcflow service in docker-compose.yml (upstream, Spark, Airflow roles).
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/cdcflow/src
COPY uv.lock pyproject.toml ./
# The locked wheels with their hashes: the runtime and the deploy extra (Celery, Redis), not the dev tools.
RUN pip install --no-cache-dir uv==0.13.8 \
    && uv export --locked --extra deploy --no-dev --no-emit-project --format requirements.txt -o /tmp/pinned.txt \
    && uv pip install --system --require-hashes -r /tmp/pinned.txt && rm /tmp/pinned.txt
# What .dockerignore lets through: the sources, never a local .venv, .git, .airflow (its database and admin
# password) or .cdcflow.
COPY . .
RUN uv pip install --system --no-deps -e .
# delta-spark's JVM side (jars.lock), fetched and hash-checked at build time; sessions find them here.
ENV CDCFLOW_JARS_DIR=/opt/cdcflow/jars
RUN python scripts/fetch_jars.py --dest /opt/cdcflow/jars
ENV PATH=/usr/local/lib/python3.11/site-packages/pyspark/bin:$PATH
# Every service runs as an ordinary user; its state lives in the volumes docker-compose mounts.
RUN useradd --create-home --uid 10001 --user-group cdcflow \
    && mkdir -p /opt/cdcflow/home /data/lake && chown cdcflow:cdcflow /opt/cdcflow/home /data/lake
USER cdcflow
