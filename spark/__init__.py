"""PySpark jobs of rocks-timer: the write-amplification comparison (``spark.wa_compare``), the
scale model (``spark.wa_model``) and the compaction sweep (``spark.tune_compaction``, on
``spark.wa_compare``'s machinery). Every job runs in local mode by default.

Spark jobs may import ``bench`` (its harness and workloads run inside Spark tasks); ``bench``
never imports ``spark`` (an import contract, docs/DECISIONS.md "Import contracts")."""
