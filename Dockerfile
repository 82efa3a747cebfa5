# One image for every cdcflow service in docker-compose.yml (upstream, Spark, Airflow roles).
FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless make git \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/cdcflow/src
COPY uv.lock pyproject.toml ./
RUN pip install --no-cache-dir uv==0.13.8 \
    && uv export --locked --all-extras --no-emit-project --format requirements.txt -o /tmp/pinned.txt \
    && uv pip install --system --require-hashes -r /tmp/pinned.txt && rm /tmp/pinned.txt
COPY . .
RUN uv pip install --system --no-deps -e .
# delta-spark's JVM side (jars.lock), fetched and hash-checked at build time; sessions find them here.
ENV CDCFLOW_JARS_DIR=/opt/cdcflow/jars
RUN python scripts/fetch_jars.py --dest /opt/cdcflow/jars
ENV PATH=/usr/local/lib/python3.11/site-packages/pyspark/bin:$PATH
