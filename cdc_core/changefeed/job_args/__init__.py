"""The arguments of cdcflow's Spark jobs, owned by the engine that sends them: one module per job, named as the job.

Each class names its job (``JOB``, the key of ``spark_engine.JOBS``), refuses bad values when read from JSON
(``from_dict``; the ``ValueError`` names the job and the argument) and turns back into that JSON (``to_dict``):
the local engine hands a job the object, the submit engine sends its JSON to ``spark_jobs.job_server``, which
rebuilds it with ``registry.from_job_dict``. ``spark_jobs`` imports these classes; nothing here imports
``spark_jobs``. ``base`` holds what they share.
"""
