"""What every mode reads and writes: the dataset formats, their manifests and the synthetic writer.

What lives here: :mod:`~trainer.datasets.tabular` (feature rows: CSV, TFRecord, channel discovery
and the tf.data pipeline), :mod:`~trainer.datasets.images` (image shards and class directories),
:mod:`~trainer.datasets.manifest` (per-file counts recorded once) and
:mod:`~trainer.datasets.synthetic` (learnable test data in every format). Training reads them, the
processing transform writes them.

May import: ``trainer.contract`` and ``trainer.logs`` (and ``gpu_table`` for image sizing); never
a mode (``trainer.train``, ``trainer.serve``, ``trainer.process``).
"""
