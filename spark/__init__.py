"""PySpark jobs of rocks-timer: the write-amplification comparison (``spark.wa_compare``), the
scale model (``spark.wa_model``) and the compaction sweep (``bench.tune_compaction`` reuses
``spark.wa_compare``'s machinery). Every job runs in local mode by default."""
