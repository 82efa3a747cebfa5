"""cdcflow engine: change-data-capture from a TiKV-like region cluster into Delta Lake."""

import os

# gRPC core's fork handlers (on by default since grpcio 1.74) make a child that is forked while a
# channel exists restart gRPC's poller before it execs; with subprocess.Popen(preexec_fn=...),
# which PySpark uses to launch its JVM, that child crashes in about one spawn in eight and Spark
# reports JAVA_GATEWAY_EXITED (grpc/grpc#43055). cdcflow never uses gRPC across a fork without
# exec, so the handlers are off unless the environment says otherwise. gRPC reads this once, when
# it is first imported: importing cdc_core before grpc is what makes it take effect.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
